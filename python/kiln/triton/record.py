"""The record of a Triton compile: what `triton.compile` was given, stored beside the group
kiln.triton keeps, so that `kiln warm --triton` (kiln/triton/warm.py) can compile it again.

The record. Every group kiln.triton stores after a compile gets a record beside it, an artifact
of kind `triton-record` (one file, record.json) under Triton's key of that compile, so it goes
where kiln's artifacts go (the local store, the remote tiers, `kiln cache pack` bundles). It holds
what `triton.compile` was given, enough to give it again:
- the kernel: its module and qualified name (a @triton.jit function at a module's top level),
  the file and line it came from, its source text and Triton's hash of it and its dependencies;
- the signature, constexprs and attributes of the ASTSource, tagged so that they come back as the
  same Python values (Triton's key is made of their text);
- the options as compiled (and those that differ from the target's defaults, for another
  target), the target, the target the driver reported, the cache-invalidating environment;
- the parts of Triton's key (Triton itself, the source, ptxas and the arch, the options, the
  environment) and the key.
A compile that kiln cannot describe (a kernel compiled from an IR file, a constexpr of a type
kiln does not encode, a stages-inspection hook) is recorded as such, with the reason, so that
`kiln warm --triton` says why it skips it.
"""
import base64
import hashlib
import json
import sys

RECORD_KIND = "triton-record"
RECORD_FILE = "record.json"
_SCHEMA = "kiln-triton-record 1"


class Unrecordable(Exception):
    """A compile kiln cannot describe well enough to replay it."""


class Refused(Exception):
    """A record that cannot be replayed here, with what to do."""


# ---- values, as Triton's key reads them (tuples stay tuples, dtypes stay dtypes)

def encode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return {"list": [encode(v) for v in value]}
    name = type(value).__name__
    module = type(value).__module__ or ""
    if module.startswith("triton.language"):
        if name == "constexpr":
            return {"constexpr": encode(value.value)}
        import triton.language as tl
        if isinstance(value, tl.dtype):
            return {"dtype": str(value)}
    if name == "JITFunction" and hasattr(value, "fn"):
        return {"jit": "%s:%s" % (value.fn.__module__, value.fn.__qualname__)}
    raise Unrecordable("a value of type %s.%s (%r) is not one kiln records" % (module, name, value))


def _paths(mapping):
    return [[list(path), encode(v)] for path, v in sorted(mapping.items())]


# ---- Triton's key, in parts

def key_parts(src, backend, options, env_vars):
    from triton.runtime.cache import triton_key
    return {"triton": triton_key(), "source": src.hash(), "backend": backend.hash(), "options": options.hash(),
            "env": str(sorted(env_vars.items()))}


def key_of(parts):
    # triton/runtime/cache.py get_cache_key, then compile()'s sha256 of it.
    # The cache manager is given that hash in base 32 (cache.py get_cache_manager): so is the record.
    text = "%s-%s-%s-%s-%s" % (parts["triton"], parts["source"], parts["backend"], parts["options"], parts["env"])
    return base64.b32encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii").rstrip("=")


def compile_inputs(depth=2):
    """What the `triton.compile` call that is asking for a cache manager was given: a dict of its
    src, target, options (parsed) and env_vars, or None when it is not compile() asking."""
    frame = sys._getframe(depth)
    for _ in range(5):
        if frame is None:
            break
        if frame.f_code.co_name == "compile" and frame.f_globals.get("__name__") == "triton.compiler.compiler":
            local = frame.f_locals  # built afresh on each access (Python <= 3.12): once per hit
            return {n: local.get(n) for n in ("src", "target", "options", "env_vars")}
        frame = frame.f_back
    return None


def target_text(target):
    if target.backend == "cuda":
        return "cuda:sm_%s" % target.arch
    return "%s:%s" % (target.backend, target.arch)


def make_record(inputs, key, filename, driver_target):
    """The record (a dict) of the compile whose inputs compile_inputs() took; its key is Triton's."""
    import triton
    from triton.compiler.compiler import ASTSource, make_backend
    from triton import knobs
    record = {"schema": _SCHEMA, "key": key, "filename": filename, "triton_version": triton.__version__,
              "name": filename[:-5] if filename.endswith(".json") else filename}
    try:
        inputs = inputs or {}
        src, target, options, env_vars = (inputs.get(n) for n in ("src", "target", "options", "env_vars"))
        if src is None or target is None or options is None or env_vars is None:
            raise Unrecordable("the compile's inputs could not be read (not called by triton.compile)")
        record["target"] = {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}
        record["target_text"] = target_text(target)
        record["driver_target"] = driver_target
        if not isinstance(src, ASTSource):
            raise Unrecordable("compiled from an IR file (%s), not from a @triton.jit kernel" % type(src).__name__)
        if getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None:
            raise Unrecordable("a stages-inspection hook (knobs.runtime.add_stages_inspection_hook) changes its key")
        fn = src.fn
        py = getattr(fn, "fn", None)
        if py is None or not hasattr(fn, "cache_key"):
            raise Unrecordable("its function (%s) is not a @triton.jit kernel" % type(fn).__name__)
        backend = make_backend(target)
        defaults = backend.parse_options({}).__dict__
        record["kernel"] = {"module": py.__module__, "qualname": py.__qualname__, "file": getattr(fn, "file_name", ""),
                            "line": getattr(fn, "starting_line_number", 0), "source": getattr(fn, "_src", ""),
                            "cache_key": fn.cache_key}
        record["signature"] = {k: encode(v) for k, v in src.signature.items()}
        record["constexprs"] = _paths(src.constants)
        record["attrs"] = _paths(src.attrs)
        record["options"] = {k: encode(v) for k, v in options.__dict__.items()}
        record["explicit_options"] = {k: encode(v) for k, v in options.__dict__.items()
                                      if k in defaults and defaults[k] != v or k not in defaults}
        record["env"] = dict(env_vars)
        record["parts"] = key_parts(src, backend, options, env_vars)
        if key_of(record["parts"]) != key:
            raise Unrecordable("Triton's key of this compile is not made the way kiln makes it again (Triton changed?)")
    except Unrecordable as e:
        record["unrecordable"] = str(e)
    return record


def store_record(ctx, record, toolchain):
    data = json.dumps(record, sort_keys=True).encode("utf-8")
    key = " | ".join([_SCHEMA, record["key"], record["filename"]])
    # Not a compile (the compile it records was counted when its group was stored).
    ctx.store_files(RECORD_KIND, key, [(RECORD_FILE, data)], label=record["name"], target=record.get("target_text", ""),
                    toolchain=toolchain, keep_first=True, compiled=False)


def records(ctx):
    """Every record in this node's cache, as dicts (ordered by kernel name, then key)."""
    out = []
    for group in ctx.list_files(RECORD_KIND):
        path = dict(group["files"]).get(RECORD_FILE)
        if path is None:
            continue
        with open(path, "rb") as f:
            out.append(json.loads(f.read()))
    out.sort(key=lambda r: (r.get("name", ""), r.get("target_text", ""), r.get("key", "")))
    return out
