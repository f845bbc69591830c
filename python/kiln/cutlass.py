"""The CuTe DSL's compiled modules (nvidia-cutlass-dsl) in kiln's store and tiers.

    import kiln.cutlass
    kiln.cutlass.install()                  # before or after `import cutlass`
    compiled = cute.compile(kernel, *args)  # a module compiled on any node is not compiled again

``cute.compile`` traces the Python kernel into MLIR, then runs the MLIR pipeline (CuTe to NVVM,
NVVM, ptxas: the module's cubin is embedded in it) and builds an ExecutionEngine for the host
side. It never uses the DSL's own file cache (CUTE_DSL_CACHE_DIR): it sets ``no_cache``. install()
wraps ``BaseDSL._compile_or_jit_module``, the one call that runs the pipeline on a traced module,
and keeps what it returns (the lowered module, as MLIR bytecode) as one kiln artifact of kind
``cute-dsl-module``: checked, signed, under the cap, in ``kiln cache list``, published to the
cluster's tiers. A hit parses those bytes and builds the engine from them, as the DSL's own file
cache does on its hits: the pipeline does not run, and what ``cute.compile`` returns is the same
object a compile gives (its ``ir_module`` can still be exported with ``export_to_c``). A miss
claims the key, so nodes that start together compile each module once; a claim whose compile
fails is released, and the DSL's error goes to the caller unchanged.

Why this hook: tracing must run on every node (the traced module *is* the input; a key of the
Python source would miss closures, globals and the arguments' layouts), and everything after the
trace is the pipeline. The export path (``export_to_c``, ``cute.runtime.load_module``) would skip
the host codegen too, but it needs a symbol prefix and a signature its serializer accepts, and
hands back a different object (no ``ir_module``, no ``__mlir__``) than ``cute.compile`` does.

The key: the DSL's own key (``get_module_hash``: a hash of the DSL's Python sources and compiler
library, the traced module's bytecode, the DSL's compile-affecting settings such as CUTE_DSL_ARCH
and the runtime library's path, the compile options), the DSL's version, the DSL class, the
pipeline as it will run (arch and options in it), and the content of every library the options
link (``link-libraries``). Compiled and not kept (``stats["not_cached"]``, with one warning):
compiles that write files or print diagnostics a hit would not (CUTE_DSL_KEEP=ptx/cubin/sass,
``--keep-ptx`` and the like, the ``warnings{}``/``remarks{}`` options), and compiles with a
post-compile hook on the compiler (the TVM-FFI entry point, built from argument specs the key does
not see), and any whose key cannot be made (a linked library that cannot be read). Not seen at
all: CUTE_DSL_COMPILER_BACKEND=cutlass, which compiles elsewhere. Nodes share keys when the
kernels' sources and the DSL lie at the same paths, as in one image: the traced module carries
its source's path, and the DSL's settings the runtime library's.
"""
import hashlib
import inspect
import io
import threading
import time
import warnings

KIND = "cute-dsl-module"
_ENTRY = "module.mlirbc"  # the one file of each stored group: the lowered module's MLIR bytecode
_SCHEMA = "kiln.cutlass key 1"

stats = {"hits": 0, "hits_remote": 0, "misses": 0, "stored": 0, "errors": 0, "not_cached": 0}

_lock = threading.Lock()
_original = None  # BaseDSL._compile_or_jit_module as the DSL defines it (kept after uninstall: a call in flight uses it)
_warned = set()
_PARAMS = ["self", "module", "pipeline", "function_name", "shared_libs", "gen_jit_engine"]


def _warn_once(topic, message):
    if topic not in _warned:
        _warned.add(topic)
        warnings.warn("kiln.cutlass: " + message, RuntimeWarning, stacklevel=3)


def _dsl_version():
    import cutlass

    return getattr(cutlass, "__version__", "?")


def _uncacheable(dsl):
    """Why a compile must run as the DSL runs it (a hit would differ from it), or ""."""
    env, options = dsl.envar, dsl.compile_options
    if env.keep_ptx or env.keep_cubin or env.keep_sass or options.full_ptx_path or options.full_cubin_path \
            or options.dump_sass_path:
        return "it writes PTX, cubin or SASS files"
    # The DSL's diagnostic session runs (and prints or writes remarks and warnings) only then.
    if options.remark_output or options.collect_compiler_diagnostics:
        return "it prints or writes the compiler's remarks and warnings"
    if getattr(dsl.compiler_provider, "_post_compile_hook", None) is not None:
        return "a post-compile hook (TVM-FFI) changes the module from inputs the key does not see"
    return ""


def _linked_files(dsl):
    """The libraries the options link ("link-libraries": paths, comma-separated), as (path, bytes)."""
    from cutlass.base_dsl.compiler import LinkLibraries

    paths = dsl.compile_options.options[LinkLibraries].value
    out = []
    for path in (p for p in paths.split(",") if p):
        with open(path, "rb") as f:  # OSError: not keyable; the caller compiles it uncached
            out.append((path, f.read()))
    return out


def _key(dsl, module, function_name, pipeline):
    h = hashlib.sha256()
    parts = [_SCHEMA, "nvidia-cutlass-dsl " + _dsl_version(), type(dsl).__module__ + "." + type(dsl).__qualname__,
             dsl.get_module_hash(module, function_name), pipeline]
    for path, data in _linked_files(dsl):
        parts += [path, hashlib.sha256(data).hexdigest()]
    for part in parts:  # length-prefixed: no two lists of parts hash alike
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return "sha256:" + h.hexdigest()


def _from_bytes(dsl, module, data, shared_libs, gen_jit_engine):
    """(engine, module) from stored bytecode, as the DSL's own file cache makes them on a hit."""
    from cutlass._mlir import ir

    loaded = ir.Module.parse(data, context=module.context)
    engine = dsl.compiler_provider.jit(loaded, shared_libs=shared_libs) if gen_jit_engine else None
    return engine, loaded


def _compile_or_jit_module(self, module, pipeline, function_name, shared_libs, gen_jit_engine):
    from . import KilnError, context

    why = _uncacheable(self)
    if not why:
        try:
            key = _key(self, module, function_name, pipeline)
        except Exception as e:  # noqa: BLE001 (a compile kiln cannot key still compiles, as the DSL would)
            why = "its key could not be made (%s: %s)" % (type(e).__name__, e)
    if why:
        stats["not_cached"] += 1
        _warn_once("not_cached:" + why, "a CuTe DSL compile is not kept because " + why)
        return _original(self, module, pipeline, function_name, shared_libs, gen_jit_engine)
    group = claim = None
    try:
        group, claim = context("none").find_or_claim_files(KIND, key)
        if group is None:
            stats["misses"] += 1
    except KilnError as e:
        stats["errors"] += 1
        _warn_once("get", "a lookup failed, compiling instead: %s" % e)
    if group is not None:
        try:
            with open(dict(group["files"])[_ENTRY], "rb") as f:
                result = _from_bytes(self, module, f.read(), shared_libs, gen_jit_engine)
            stats["hits_remote" if group.get("cache_source") == "remote" else "hits"] += 1
            return result
        except Exception as e:  # noqa: BLE001 (unreadable, unparsable or not loadable: compile instead)
            stats["errors"] += 1
            _warn_once("read", "a stored module could not be loaded, compiling instead: %s" % e)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        engine, compiled = _original(self, module, pipeline, function_name, shared_libs, gen_jit_engine)
    except BaseException:
        # The next process or node to ask compiles it (and raises the same error there).
        if claim is not None and claim.held:
            claim.release()
        raise
    wall, cpu = (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000
    try:
        buf = io.BytesIO()
        compiled.operation.write_bytecode(buf)
        arch = self.compile_options.gpu_arch or self.envar.arch or ""
        context("none").store_files(KIND, key, [(_ENTRY, buf.getvalue())], label=function_name,
                                    target="cuda:" + arch if arch else "", toolchain="nvidia-cutlass-dsl " + _dsl_version(),
                                    compile_ms=wall, compile_cpu_ms=cpu, claim=claim, compiled=True)
        stats["stored"] += 1
    except KilnError as e:
        stats["errors"] += 1
        _warn_once("put", "a module could not be stored (this run goes on; the next compiles it again): %s" % e)
        if claim is not None and claim.held:
            claim.release()
    return engine, compiled


def install():
    """Serves the CuTe DSL's compiles from kiln's store (see the module's docstring); idempotent.
    Returns True; False, with a warning, where this DSL has no such hook (its compiles go on
    uncached)."""
    global _original
    from cutlass.base_dsl.dsl import BaseDSL

    with _lock:
        current = BaseDSL.__dict__.get("_compile_or_jit_module")
        if current is _compile_or_jit_module:
            return True
        if current is None or list(inspect.signature(current).parameters) != _PARAMS:
            _warn_once("unsupported", "nvidia-cutlass-dsl %s has no BaseDSL._compile_or_jit_module%s as 4.8 has: "
                       "its compiles are not kept" % (_dsl_version(), tuple(_PARAMS[1:])))
            return False
        _original = current
        BaseDSL._compile_or_jit_module = _compile_or_jit_module
        return True


def uninstall():
    """Gives the DSL its own compile back (what install() replaced); a no-op when not installed."""
    from cutlass.base_dsl.dsl import BaseDSL

    with _lock:
        if _original is not None and BaseDSL.__dict__.get("_compile_or_jit_module") is _compile_or_jit_module:
            BaseDSL._compile_or_jit_module = _original
