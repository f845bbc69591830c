"""DeepSpeed's op builders, built by kiln.

DeepSpeed builds its C++/CUDA ops ("op builders": ``CPUAdamBuilder``, ``FusedAdamBuilder``, ...)
just in time through ``torch.utils.cpp_extension.load``: ninja, a compiler process per source,
a build folder per op name. This module gives those builders to ``kiln.torch.load`` instead,
which compiles in-process with Clang against a header artifact of torch and keeps the result in
kiln's store, so the second job (or the second machine, through a shared tier) builds nothing.

What it offers, from the smallest piece to the whole job:

``load_builder(builder, verbose=False)``
    Builds any object shaped like DeepSpeed's ``OpBuilder`` through kiln, doing what
    ``OpBuilder.jit_load`` does, and memoises the module per op name.
``kiln_builder_class(cls)`` / ``KilnBuilder(builder_or_class)``
    A builder class (or a view of one builder) whose ``load()`` and ``jit_load()`` go through
    kiln, everything else being the builder's own.
``accelerator(base=None, builders=None)``
    A DeepSpeed accelerator whose ``get_op_builder`` / ``create_op_builder`` hand out such
    builders. With DeepSpeed importable it is a real ``DeepSpeedAccelerator`` (a subclass,
    made at run time, of DeepSpeed's own ``CPU_Accelerator`` unless ``base`` names another),
    so ``deepspeed.accelerator.set_accelerator`` accepts it.
``install()`` / ``uninstall()``
    Makes a whole DeepSpeed job build its ops through kiln without touching DeepSpeed's
    files; see ``install``'s docstring for how and why.

Nothing heavy is imported here: torch and DeepSpeed are imported when a function needs them.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
import warnings

__all__ = [
    "KilnBuilder",
    "accelerator",
    "install",
    "installed",
    "kiln_builder_class",
    "load_builder",
    "uninstall",
]

# Modules built through kiln for builders that keep no memo of their own (DeepSpeed's builders
# keep theirs in OpBuilder._loaded_ops, which load_builder fills instead): op name -> module.
_loaded_ops: dict = {}
# One build at a time per process: a second thread asking for the same op waits for the first
# and then finds it memoised, as it would find it in DeepSpeed's _loaded_ops.
_load_lock = threading.RLock()


# ----------------------------------------------------------------------------------------------
# Loading one builder


def _op_name(builder) -> str:
    name = getattr(builder, "name", None) or getattr(builder, "NAME", None)
    if not name:
        raise TypeError(
            f"kiln.deepspeed: {type(builder).__name__} is not shaped like a DeepSpeed op builder: "
            "it has neither a 'name' nor a 'NAME'")
    return str(name)


def _is_ds_op_builder_class(klass) -> bool:
    """True for DeepSpeed's OpBuilder base itself (either copy: deepspeed.ops.op_builder or the
    install-time op_builder package), recognised without importing DeepSpeed."""
    return (klass.__name__ == "OpBuilder" and "_loaded_ops" in klass.__dict__
            and "jit_load" in klass.__dict__)


def _is_ds_builder(builder) -> bool:
    return any(_is_ds_op_builder_class(k) for k in type(builder).__mro__)


def _is_cuda_op_builder(builder) -> bool:
    return any(k.__name__ == "CUDAOpBuilder" for k in type(builder).__mro__)


def _memo_for(builder) -> dict:
    """The dict an op is memoised in: DeepSpeed's own OpBuilder._loaded_ops for its builders (so
    that DeepSpeed's load(), kiln's and any code reading _loaded_ops agree on one module per op,
    which matters for ops with process-wide C++ state such as cpu_adam's optimizer table), else
    kiln's."""
    for klass in type(builder).__mro__:
        memo = klass.__dict__.get("_loaded_ops")
        if isinstance(memo, dict):
            return memo
    return _loaded_ops


def _strip(builder, args) -> list:
    args = list(args or [])
    strip = getattr(builder, "strip_empty_entries", None)
    if callable(strip):
        return list(strip(args))
    return [a for a in args if len(a) > 0]


def _source_path(builder, path: str) -> str:
    """Resolves a source or include path as DeepSpeed's deepspeed_src_path does: absolute paths
    as they are; relative ones through the builder's deepspeed_src_path when it has one (for
    DeepSpeed's builders: the deepspeed/ops folder), else against the folder of the file that
    defines the builder's class."""
    resolve = getattr(builder, "deepspeed_src_path", None)
    if callable(resolve):
        path = resolve(path)
    elif not os.path.isabs(path):
        try:
            base = os.path.dirname(os.path.abspath(inspect.getfile(type(builder))))
        except (TypeError, OSError):
            base = os.getcwd()
        path = os.path.join(base, path)
    return os.path.abspath(path)


def _kiln_torch_load():
    # Looked up at every call, so that kiln.torch.load can be wrapped (by a test, or a profiler).
    from .. import torch as kiln_torch

    return kiln_torch.load


def _jit_load(builder, verbose: bool = True):
    """What DeepSpeed's OpBuilder.jit_load does (read in DeepSpeed 0.19.8), with kiln.torch.load
    in place of torch.utils.cpp_extension.load and without its ninja check (kiln runs no build
    tool). Memoises the module."""
    name = _op_name(builder)
    # DeepSpeed's jit_load imports torch.utils.cpp_extension (verify_ninja_availability, load)
    # before it asks the builder for anything, and builders rely on it: DeepCompileBuilder's
    # include_paths() reads torch.utils.cpp_extension.CUDA_HOME after a bare `import torch`, which
    # does not import that submodule.
    try:
        import torch.utils.cpp_extension  # noqa: F401
    except ImportError:
        pass
    is_compatible = getattr(builder, "is_compatible", None)
    if callable(is_compatible) and not is_compatible(verbose):
        reason = getattr(builder, "error_log", None)
        raise RuntimeError(
            f"kiln.deepspeed: cannot build op '{name}' ({type(builder).__name__}): its "
            f"is_compatible() returned False: "
            f"{reason or 'the builder gave no reason (its error_log is empty)'}")

    cuda_builder = _is_cuda_op_builder(builder)
    is_rocm = getattr(builder, "is_rocm_pytorch", None)
    rocm = bool(is_rocm()) if callable(is_rocm) else False
    if cuda_builder and not rocm:
        import torch

        builder.build_for_cpu = not torch.cuda.is_available()

    has_jit_mode = hasattr(builder, "jit_mode")
    saved_jit_mode = getattr(builder, "jit_mode", None)
    if has_jit_mode:
        builder.jit_mode = True
    arch_list_present = "TORCH_CUDA_ARCH_LIST" in os.environ
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    normalized = arch_list.strip() if arch_list is not None else None
    if _is_ds_builder(builder):
        # DeepSpeed's compute_capability_args reads this in JIT mode.
        builder._jit_arch_list = normalized or None

    start = time.time()
    sources = [_source_path(builder, p) for p in _strip(builder, builder.sources())]
    include_getter = getattr(builder, "include_paths", None)
    includes = [_source_path(builder, p)
                for p in _strip(builder, include_getter() if callable(include_getter) else [])]
    try:
        nvcc_getter = getattr(builder, "nvcc_args", None)
        nvcc_args = _strip(builder, nvcc_getter() if callable(nvcc_getter) else [])
        cxx_getter = getattr(builder, "cxx_args", None)
        cxx_args = _strip(builder, cxx_getter() if callable(cxx_getter) else [])

        cxx_args.append("-UC10_USE_GLOG")
        nvcc_args.append("-UC10_USE_GLOG")
        if cuda_builder and not getattr(builder, "build_for_cpu", False) and getattr(
                builder, "enable_bf16", False):
            cxx_args.append("-DBF16_AVAILABLE")
            nvcc_args += ["-DBF16_AVAILABLE", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
                          "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"]
        if rocm:
            cxx_args.append("-D__HIP_PLATFORM_AMD__=1")
            os.environ["PYTORCH_ROCM_ARCH"] = builder.get_rocm_gpu_arch()
            cxx_args.append(f"-DROCM_WAVEFRONT_SIZE={builder.get_rocm_wavefront_size()}")

        ld_getter = getattr(builder, "extra_ldflags", None)
        ldflags = _strip(builder, ld_getter() if callable(ld_getter) else [])
        # DeepSpeed passes True for a CUDA build and None (decide by the sources) otherwise.
        with_cuda = True if cuda_builder and not getattr(builder, "build_for_cpu", False) else None

        module = _kiln_torch_load()(name=name,
                                    sources=sources,
                                    extra_include_paths=includes,
                                    extra_cflags=cxx_args,
                                    extra_cuda_cflags=nvcc_args,
                                    extra_ldflags=ldflags,
                                    with_cuda=with_cuda,
                                    verbose=verbose)
        if verbose:
            print(f"Time to load {name} op: {time.time() - start} seconds")
        _memo_for(builder)[name] = module
        return module
    finally:
        if arch_list_present:
            os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
        else:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        if _is_ds_builder(builder):
            builder._jit_arch_list = None
        if has_jit_mode:
            builder.jit_mode = saved_jit_mode


def load_builder(builder, verbose: bool = False):
    """Builds ``builder``'s op through ``kiln.torch.load`` and returns its module.

    ``builder`` is anything shaped like DeepSpeed's ``OpBuilder``: ``NAME`` (or ``name``),
    ``sources()``, and optionally ``absolute_name()``, ``include_paths()``, ``cxx_args()``,
    ``nvcc_args()``, ``extra_ldflags()``, ``is_compatible(verbose)``,
    ``strip_empty_entries(args)``, ``deepspeed_src_path(path)``. It does what DeepSpeed's
    ``OpBuilder.jit_load`` does: ``is_compatible()`` false raises a RuntimeError naming the op,
    the builder class and its ``error_log``; relative paths are resolved like
    ``deepspeed_src_path``; empty flags are stripped; ``-UC10_USE_GLOG`` is added; CUDA
    builders get ``with_cuda`` and their bf16 flags as DeepSpeed gives them.

    Memoised per op name like DeepSpeed's ``OpBuilder._loaded_ops`` (for DeepSpeed's builders
    that very dict): a second call, from any builder object of that name, returns the same
    module without building anything.
    """
    name = _op_name(builder)
    memo = _memo_for(builder)
    if name in memo:
        return memo[name]
    with _load_lock:
        if name in memo:
            return memo[name]
        return _jit_load(builder, verbose)


# ----------------------------------------------------------------------------------------------
# Builders whose load() goes through kiln


def _prebuilt_module(builder):
    """DeepSpeed's OpBuilder.load imports an op that was built when DeepSpeed was installed
    (DS_BUILD_OPS=1) instead of building it; kiln keeps that: there is nothing to compile."""
    if not _is_ds_builder(builder):
        return None
    try:
        from deepspeed.git_version_info import installed_ops, torch_info, accelerator_name
        from deepspeed.accelerator import get_accelerator
    except ImportError:
        return None
    name = _op_name(builder)
    if not (installed_ops.get(name, False) and accelerator_name == get_accelerator()._name):
        return None
    import importlib

    import torch

    builder.validate_torch_version(torch_info)
    if torch.cuda.is_available() and _is_cuda_op_builder(builder):
        builder.validate_torch_op_version(torch_info)
    return importlib.import_module(builder.absolute_name())


class _KilnBuilderMixin:
    """Sits right after the kiln subclass in its MRO: DeepSpeed's OpBuilder.load, with kiln's
    jit_load."""

    _kiln_routed = True

    def load(self, verbose=False):
        name = _op_name(self)
        memo = _memo_for(self)
        if name in memo:
            return memo[name]
        with _load_lock:
            if name in memo:
                return memo[name]
            module = _prebuilt_module(self)
            if module is not None:
                memo[name] = module
                return module
            return self.jit_load(verbose)

    def jit_load(self, verbose=True):
        return _jit_load_via_kiln(self, verbose)


_routed_classes: dict = {}


def _custom_load(cls):
    """The load() a builder class defines above DeepSpeed's OpBuilder base (NotImplementedBuilder
    raising, AsyncIOBuilder loading PinMemoryBuilder first, ...), or None."""
    for klass in cls.__mro__:
        if "load" in klass.__dict__:
            if _is_ds_op_builder_class(klass) or klass is object:
                return None
            return klass.__dict__["load"]
    return None


def kiln_builder_class(cls):
    """A subclass of the builder class ``cls`` whose ``load()`` and ``jit_load()`` build through
    kiln; everything else (sources, flags, ``is_compatible``, ``isinstance`` checks against
    ``cls``) is ``cls``'s own. One class per ``cls``, made once.

    A ``load()`` that ``cls`` itself overrides is kept, so that what it does around loading
    still happens (NotImplementedBuilder raising, AsyncIOBuilder loading PinMemoryBuilder first);
    its ``super().load()`` and ``self.jit_load()`` reach kiln. The MRO is
    [subclass, kiln's load/jit_load, cls, ...], so even DeepSpeed's
    ``super(type(builder), builder).load()`` (pin_memory_load.py) lands on kiln's load rather
    than back on the override, which a plain subclass would recurse into.
    """
    if not isinstance(cls, type):
        raise TypeError(f"kiln_builder_class takes a builder class, got {cls!r}")
    if getattr(cls, "_kiln_routed", False):
        return cls
    with _load_lock:
        routed = _routed_classes.get(cls)
        if routed is not None:
            return routed
        namespace = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "_kiln_base": cls,
        }
        custom = _custom_load(cls)
        if custom is not None:
            namespace["load"] = custom
        # Bases (mixin, cls) give the MRO [routed, mixin, cls, ...].
        routed = type(cls.__name__, (_KilnBuilderMixin, cls), namespace)
        _routed_classes[cls] = routed
        return routed


def KilnBuilder(builder):  # noqa: N802  (reads like the class it stands for)
    """``builder`` routed through kiln.

    Given a builder class, the same as ``kiln_builder_class``. Given a builder object, a view of
    it: an instance of the routed class sharing the builder's attributes (its ``__dict__``), so
    ``KilnBuilder(CPUAdamBuilder()).load()`` builds through kiln and state the builder keeps
    (``error_log``, ``jit_mode``) is seen from both.
    """
    if isinstance(builder, type):
        return kiln_builder_class(builder)
    routed = kiln_builder_class(type(builder))
    if type(builder) is routed:
        return builder
    view = object.__new__(routed)
    try:
        view.__dict__ = builder.__dict__
    except (AttributeError, TypeError) as e:
        raise TypeError(f"KilnBuilder cannot share the attributes of {type(builder).__name__}: {e}"
                        ) from e
    return view


# ----------------------------------------------------------------------------------------------
# An accelerator whose op builders build through kiln


class _KilnAcceleratorMixin:
    """The op-builder methods of a DeepSpeed accelerator, handing out kiln-routed builders."""

    _kiln_accelerator = True

    def _kiln_init(self, builders):
        self._kiln_builders = {}
        for cls in builders or ():
            self.register_op_builder(cls)

    def register_op_builder(self, cls, class_name=None):
        """Makes ``get_op_builder(class_name or cls.__name__)`` return ``cls`` (routed)."""
        self._kiln_builders[class_name or cls.__name__] = cls

    def get_op_builder(self, class_name):
        cls = self._kiln_builders.get(class_name)
        if cls is None:
            cls = self._kiln_base_get_op_builder(class_name)
        if cls is None:
            return None
        return kiln_builder_class(cls)

    def create_op_builder(self, class_name):
        cls = self.get_op_builder(class_name)
        return cls() if cls is not None else None

    def _kiln_base_get_op_builder(self, class_name):
        base = getattr(super(), "get_op_builder", None)
        return base(class_name) if base is not None else None


class _StandaloneCpuAccelerator(_KilnAcceleratorMixin):
    """kiln's accelerator where DeepSpeed cannot be imported: the CPU accelerator's cheap
    methods, and op builders from those registered with it (or from the module that
    ``op_builder_dir()`` names, if one is importable)."""

    def __init__(self, builders=None):
        self._name = "cpu"
        self._communication_backend_name = "gloo"
        self._compile_backend = "inductor"
        self._kiln_init(builders)

    def op_builder_dir(self):
        return "deepspeed.ops.op_builder.cpu"

    def _kiln_base_get_op_builder(self, class_name):
        import importlib

        try:
            module = importlib.import_module(self.op_builder_dir())
        except ImportError:
            return None
        return getattr(module, class_name, None)

    def is_synchronized_device(self):
        return True

    def use_host_timers(self):
        return True

    def resolves_data_dependency(self):
        return True

    def handles_memory_backpressure(self):
        return True

    def device_name(self, device_index=None):
        return "cpu"

    def current_device_name(self):
        return "cpu"

    def current_device(self):
        return os.environ.get("LOCAL_RANK", 0)

    def device(self, device_index=None):
        return None

    def set_device(self, device_index):
        return None

    def synchronize(self, device_index=None):
        return None

    def is_available(self):
        return True

    def communication_backend_name(self):
        return self._communication_backend_name

    def is_triton_supported(self):
        return False

    def is_bf16_supported(self):
        return True

    def get_compile_backend(self):
        return self._compile_backend

    def on_accelerator(self, tensor):
        return str(tensor.device).startswith("cpu")

    def pin_memory(self, tensor, *args, **kwargs):
        return tensor

    def empty_cache(self):
        return None

    def lazy_call(self, callback):
        return callback()

    def visible_devices_envs(self):
        return ["CUDA_VISIBLE_DEVICES"]

    def export_envs(self):
        return []


_accelerator_classes: dict = {}


def _accelerator_class(base):
    with _load_lock:
        cls = _accelerator_classes.get(base)
        if cls is None:

            def __init__(self, builders=None):
                base.__init__(self)
                self._kiln_init(builders)

            cls = type(f"Kiln_{base.__name__}", (_KilnAcceleratorMixin, base), {
                "__init__": __init__,
                "__module__": __name__,
                "__doc__": f"DeepSpeed's {base.__name__}, its op builders built through kiln.",
            })
            _accelerator_classes[base] = cls
        return cls


def _deepspeed_cpu_accelerator_class():
    try:
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator
    except ImportError:
        return None
    return CPU_Accelerator


def accelerator(base=None, builders=None):
    """A DeepSpeed accelerator whose ``get_op_builder`` / ``create_op_builder`` return builders
    that build through kiln.

    With DeepSpeed importable, an instance of a class made at run time that subclasses ``base``
    (default: DeepSpeed's ``CPU_Accelerator``) and overrides only the op-builder methods, so the
    accelerator's ~66 abstract methods are DeepSpeed's own, ``_name`` is the base's
    (``'cpu'``), and ``deepspeed.accelerator.set_accelerator`` accepts it. Without DeepSpeed, a
    plain object with the CPU accelerator's cheap methods (``_name``, ``device_name``,
    ``communication_backend_name``, ``op_builder_dir``, ...).

    ``builders``: builder classes to hand out by class name before the base's own (a way to
    give a job builders of its own, and the only builders there are without DeepSpeed).
    ``op_builder_dir()`` is the base's.
    """
    if base is None:
        base = _deepspeed_cpu_accelerator_class()
        if base is None:
            return _StandaloneCpuAccelerator(builders)
    elif getattr(base, "_kiln_accelerator", False):
        return base(builders)
    return _accelerator_class(base)(builders)


# ----------------------------------------------------------------------------------------------
# A whole DeepSpeed job


_installed: dict = {}


def installed() -> bool:
    """True while ``install()`` is in effect."""
    return bool(_installed)


def _ds_jit_load(self, verbose=True):
    """OpBuilder.jit_load while kiln is installed."""
    return _jit_load_via_kiln(self, verbose)


def _torch_fallback(builder, error):
    """DeepSpeed's own jit_load for an op kiln refused to build (not a compile error: kiln.torch
    refuses CUDA and SYCL sources today, or has no compiler on this machine), where install()
    allowed it; else None."""
    if not _installed or not _installed["fallback"]:
        return None
    try:
        from .. import KilnError
    except ImportError:
        return None
    if not isinstance(error, KilnError) or getattr(error, "code", "") == "compile_error":
        return None
    for op_builder, original in _installed["patched"]:
        if isinstance(builder, op_builder):
            return original
    return None


def _jit_load_via_kiln(builder, verbose):
    with _load_lock:
        try:
            return _jit_load(builder, verbose)
        except Exception as e:
            original = _torch_fallback(builder, e)
            if original is None:
                raise
            warnings.warn(
                f"kiln.deepspeed: op '{_op_name(builder)}' ({type(builder).__name__}) is built by "
                f"DeepSpeed's own loader (torch.utils.cpp_extension): kiln did not build it: {e}",
                RuntimeWarning, stacklevel=3)
        return original(builder, verbose)


def install(base=None, fallback=True):
    """Makes this process's DeepSpeed build its ops through kiln, without changing DeepSpeed's
    files; call it before or after ``import deepspeed``. Returns kiln's accelerator.

    Why two steps. ``import deepspeed`` imports ``deepspeed.ops`` first, and
    ``deepspeed/ops/op_builder/__init__.py`` binds every ``XxxBuilder`` name once, to
    ``get_accelerator().get_op_builder("XxxBuilder")`` of the accelerator current at that moment
    (auto-detected, or ``DS_ACCELERATOR``); ``deepspeed/ops/adam/cpu_adam.py`` then holds its
    own ``from deepspeed.ops.op_builder import CPUAdamBuilder`` and ``DeepSpeedCPUAdam`` calls
    ``CPUAdamBuilder().load()``. Making an accelerator current afterwards
    (``set_accelerator``) changes none of those names, and making one current *before* the
    binding is impossible from outside: ``deepspeed.accelerator`` cannot be imported without
    running ``deepspeed/__init__.py``, which does the binding. So:

    1. Every builder already bound, whatever accelerator made it, inherits ``load()`` from
       DeepSpeed's ``OpBuilder``, and that ``load()`` (memo, then a prebuilt op if DeepSpeed was
       installed with DS_BUILD_OPS=1, else ``self.jit_load()``) is right as it is: only the
       build step is torch's. ``install()`` replaces ``OpBuilder.jit_load`` (one attribute of
       the class object in memory) with kiln's, which does what DeepSpeed's does with
       ``kiln.torch.load`` in place of ``torch.utils.cpp_extension.load``. Builders that
       override ``load()`` reach it through ``super().load()``, including PinMemoryBuilder's
       ``super(type(builder), builder)``. Modules are still memoised in
       ``OpBuilder._loaded_ops``, so an op DeepSpeed already loaded stays the one in use.
    2. kiln's accelerator becomes current (``set_accelerator``), so builders asked for later,
       ``get_accelerator().create_op_builder(...)`` as DeepSpeed's engine and ZeRO do, come
       from kiln. It subclasses the class of the accelerator DeepSpeed chose (or ``base``), not
       always ``CPU_Accelerator``: a CUDA job stays a CUDA job.

    ``fallback``: an op that kiln refuses to build rather than fails to compile (today
    kiln.torch.load takes no CUDA or SYCL sources, so DeepSpeed's CUDA builders on a GPU
    machine; or a machine without kiln's compiler) is built by DeepSpeed's own ``jit_load``,
    with a RuntimeWarning naming the op and kiln's reason, so that installing kiln never stops
    a job that ran before. ``fallback=False`` raises kiln's error instead. A compile error is
    raised either way, as DeepSpeed would raise torch's.

    ``install()`` imports DeepSpeed if the job has not yet (so set ``DS_ACCELERATOR`` before
    calling it, as before ``import deepspeed``). Calling it again does nothing; ``uninstall()``
    restores DeepSpeed's ``jit_load`` and the previous accelerator. Left alone: builders with
    a ``jit_load`` of their own (XPU's SYCL builders), and ``build_extension()`` (setup.py
    ahead-of-time builds stay torch's).
    """
    if _installed:
        return _installed["accelerator"]
    try:
        import deepspeed  # noqa: F401
        from deepspeed.accelerator import get_accelerator, set_accelerator
        import deepspeed.ops.op_builder.builder  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            f"kiln.deepspeed.install() needs DeepSpeed, which cannot be imported here: {e}") from e

    with _load_lock:
        patched = []
        for module_name in ("deepspeed.ops.op_builder.builder", "op_builder.builder"):
            module = sys.modules.get(module_name)
            op_builder = getattr(module, "OpBuilder", None) if module is not None else None
            if op_builder is None or any(op_builder is p for p, _ in patched):
                continue
            patched.append((op_builder, op_builder.__dict__["jit_load"]))
            op_builder.jit_load = _ds_jit_load

        previous = get_accelerator()
        if getattr(previous, "_kiln_accelerator", False):
            current = previous
        else:
            current = accelerator(base=base or type(previous))
            set_accelerator(current)
        _installed.update(accelerator=current, previous=previous, patched=patched,
                          fallback=bool(fallback))
        return current


def uninstall():
    """Undoes ``install()``: DeepSpeed's own ``OpBuilder.jit_load`` and the accelerator that was
    current before. Modules already loaded stay loaded (and memoised)."""
    with _load_lock:
        if not _installed:
            return
        for op_builder, original in _installed["patched"]:
            op_builder.jit_load = original
        from deepspeed.accelerator import get_accelerator, set_accelerator

        if get_accelerator() is _installed["accelerator"]:
            set_accelerator(_installed["previous"])
        _installed.clear()
