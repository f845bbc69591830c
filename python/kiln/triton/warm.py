"""Warming Triton's kernels on a machine with no GPU: what a run compiled is recorded, and
`kiln warm --triton` compiles it again for a `cuda:sm_XX` target, with Triton's bundled ptxas.

The records are described in kiln/triton/record.py.

Replaying needs the kernel's module under a folder the command line names (--path DIR; a record
comes from a cache another node may have written, and importing a module runs it, so kiln imports
nothing from anywhere else: not sys.path, not a file a record names outside those folders); a
kernel defined in a script
run as __main__ or inside a function cannot be replayed. For the target it was recorded for, the
key computed again must be the recorded one: where it is not, the record is refused and the
parts that differ are named (Triton's version, the kernel's source, ptxas, an option, an
environment variable). For another target the parts that do not depend on the target must match.
While a record compiles, Triton's active driver answers the warmed target (a driver that knows
only the target: `tl.target_info` sees what it sees on that GPU, and kiln.triton keys the group
as that GPU's node does), so the groups made are the ones those nodes look for.
"""
import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import sys
import time

from .record import _SCHEMA, Refused, key_of, key_parts, records, target_text


# ---- replay

def decode(value):
    if not isinstance(value, dict):
        return value
    if "tuple" in value:
        return tuple(decode(v) for v in value["tuple"])
    if "list" in value:
        return [decode(v) for v in value["list"]]
    if "constexpr" in value:
        import triton.language as tl
        return tl.constexpr(decode(value["constexpr"]))
    if "dtype" in value:
        import triton.language as tl
        return tl.dtype(value["dtype"])
    if "jit" in value:
        module, qualname = value["jit"].split(":", 1)
        return _jit_function(module, qualname, None)
    raise Refused("a value in the record is not one kiln knows (%r): recorded by a newer kiln?" % (value,))


def _unpaths(items):
    return {tuple(path): decode(v) for path, v in items}



class _TargetDriver:
    """Triton's active driver while a record compiles: it answers the target being warmed (what
    `tl.target_info.current_target()` and kiln.triton's key read) and knows nothing else."""

    def __init__(self, target):
        self.target = target

    @classmethod
    def is_active(cls):
        return False

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0


@contextlib.contextmanager
def driver_target(target):
    """Triton compiles as on a GPU of `target` (a GPUTarget): its active driver answers that
    target for the time of the block."""
    from triton.runtime.driver import driver
    before = driver._active  # set_active has no getter; reset_active() would start a real driver
    driver.set_active(_TargetDriver(target))
    try:
        yield
    finally:
        driver._active = before


def parse_target(text):
    """"cuda:sm_90" -> GPUTarget("cuda", 90, 32); raises ValueError naming what is accepted."""
    from triton.backends.compiler import GPUTarget
    backend, _, arch = text.partition(":")
    if backend == "cuda" and arch.startswith("sm_") and arch[3:].isdigit():
        return GPUTarget("cuda", int(arch[3:]), 32)
    raise ValueError("kiln warm --triton: target %r is not one it warms (cuda:sm_XX, e.g. cuda:sm_90)" % text)


def _from_module(module, qualname):
    """The @triton.jit function `qualname` of the imported `module`, through the wrappers
    @triton.autotune and @triton.heuristics put around it; None when it is not there."""
    from triton.runtime.jit import JITFunction
    obj = sys.modules.get(module)
    for part in qualname.split(".") if obj is not None else ():
        obj = getattr(obj, part, None)
    while obj is not None and not isinstance(obj, JITFunction):
        obj = getattr(obj, "fn", None)
    return obj


def _registered(module, qualname):
    """Triton's registry of JIT functions by "module:qualname" where it has one (3.9 does; 3.6,
    on the lent GPU machines, does not), else the imported module's attribute."""
    try:
        from triton.runtime.jit import _triton_jit_function_registry as registry
    except ImportError:
        registry = {}
    return registry.get("%s:%s" % (module, qualname)) or _from_module(module, qualname)


# The folders `--path` named (realpath): the only places a record's module may be imported from.
_ALLOWED = []


def _under_allowed(path):
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in _ALLOWED)


def _check_importable_here(module, record_file):
    """Refused unless `module` would be imported from a --path folder (found without running it),
    or, when it is found nowhere, `record_file` lies under one."""
    import importlib.machinery

    top = module.split(".")[0]
    if top in sys.modules:
        origin = getattr(sys.modules[top], "__file__", None)
        if origin and _under_allowed(origin):
            return
        raise Refused("module %s is already loaded from %s, outside the --path folders: kiln warm --triton imports kernels "
                      "only from the folders its command line names" % (top, origin or "(built in)"))
    spec = importlib.machinery.PathFinder.find_spec(top, _ALLOWED)
    if spec is not None:
        return
    if record_file and _under_allowed(record_file):
        return
    raise Refused("the kernel's module %s is not under a folder named by --path (kiln warm --triton imports kernels only "
                  "from the folders its command line names: a record may come from another node's cache): add --path DIR"
                  % module)


def _jit_function(module, qualname, record_file):
    if module != "__main__" and "<locals>" not in qualname:
        _check_importable_here(module, record_file)
    found = _registered(module, qualname)
    if found is not None:
        return found
    if module == "__main__":
        raise Refused("%s is defined in a script run as __main__: kiln can replay a kernel from a module it can import "
                      "(move the kernel into a module, or import the script's kernels from one)" % qualname)
    if "<locals>" in qualname:
        raise Refused("%s.%s is defined inside a function: kiln can replay only kernels defined at a module's top level"
                      % (module, qualname))
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
            raise Refused("importing %s failed: %s" % (module, e))
        if not (record_file and os.path.isfile(record_file)):
            raise Refused("the kernel's module %s cannot be imported here, and its file %s is not here: put the module "
                          "on the path (kiln warm --triton --path DIR, or PYTHONPATH)" % (module, record_file or "(unknown)"))
        spec = importlib.util.spec_from_file_location(module, record_file)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module] = loaded
        try:
            spec.loader.exec_module(loaded)
        except Exception as load_error:
            del sys.modules[module]
            raise Refused("loading %s from %s failed: %s: %s" % (module, record_file, type(load_error).__name__, load_error))
    except Refused:
        raise
    except Exception as e:
        raise Refused("importing %s failed: %s: %s" % (module, type(e).__name__, e))
    found = _registered(module, qualname)
    if found is None:
        raise Refused("%s has no @triton.jit kernel %s (renamed or moved since the run?)" % (module, qualname))
    return found


def _differences(record, here, fn, options, same_target):
    """What differs between the recorded key and the one made here, in words."""
    was = record["parts"]
    said = []
    if was["triton"] != here["triton"]:
        import triton
        if record["triton_version"] != triton.__version__:
            said.append("Triton: recorded with %s, this is %s (warm with the run's Triton, or run once with this one to "
                        "record its kernels)" % (record["triton_version"], triton.__version__))
        else:
            said.append("Triton %s's own code differs from the run's (another build of the same version)" % triton.__version__)
    if was["source"] != here["source"]:
        k = record["kernel"]
        if fn.cache_key == k["cache_key"]:
            said.append("the signature, constexprs or attributes came out different from the recorded ones")
        elif getattr(fn, "_src", None) != k["source"]:
            said.append("the kernel's source: %s:%s here is not the source recorded from %s:%s"
                        % (fn.file_name, fn.starting_line_number, k["file"], k["line"]))
        elif fn.starting_line_number != k["line"]:
            said.append("the kernel's line: it starts at line %s of %s, the record's at line %s (Triton's key counts it)"
                        % (fn.starting_line_number, fn.file_name, k["line"]))
        else:
            said.append("a function the kernel calls, or a global constexpr it reads, differs from the run's")
    if same_target and was["backend"] != here["backend"]:
        said.append("ptxas and the arch: recorded '%s', here '%s' (another ptxas: TRITON_PTXAS_PATH or another Triton)"
                    % (was["backend"], here["backend"]))
    if same_target and was["options"] != here["options"]:
        recorded = {k: decode(v) for k, v in record["options"].items()}
        now = options.__dict__
        names = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
        said.append("options: " + ", ".join("%s recorded %r, here %r" % (k, recorded.get(k), now.get(k)) for k in names))
    if was["env"] != here["env"]:
        from triton._C.libtriton import get_cache_invalidating_env_vars
        now = get_cache_invalidating_env_vars()
        then = record["env"]
        names = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
        said.append("environment: " + ", ".join("%s recorded %r, here %r" % (k, then.get(k), now.get(k)) for k in names)
                    + " (set it as the run had it)")
    return said


def replay(record, target=None, seen=None):
    """Compiles one record for `target` (a GPUTarget; None: the record's own) through kiln's
    cache. Returns {"kernel", "target", "status": hit|compiled|refused|failed, "reason", "ms"};
    None when `seen` (a set of the keys replayed so far, updated) has its key already (two
    records of one kernel for two targets, both warmed for a third)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend
    from triton._C.libtriton import get_cache_invalidating_env_vars
    out = {"kernel": record.get("name", "?"), "key": record.get("key", ""), "target": "", "status": "refused",
           "reason": "", "ms": 0.0}
    try:
        if record.get("schema") != _SCHEMA:
            raise Refused("a record of another schema (%r): made by another kiln" % record.get("schema"))
        if target is None and "target" in record:
            t = record["target"]
            target = GPUTarget(t["backend"], t["arch"], t["warp_size"])
        if target is not None:
            out["target"] = target_text(target)
        if "unrecordable" in record:
            raise Refused("the run could not record it: " + record["unrecordable"])
        same_target = (target.backend, target.arch, target.warp_size) == tuple(
            record["target"][k] for k in ("backend", "arch", "warp_size"))
        k = record["kernel"]
        fn = _jit_function(k["module"], k["qualname"], k["file"])
        src = ASTSource(fn, {name: decode(v) for name, v in record["signature"].items()}, _unpaths(record["constexprs"]),
                        _unpaths(record["attrs"]))
        backend = make_backend(target)
        chosen = record["options"] if same_target else record["explicit_options"]
        options = backend.parse_options({name: decode(v) for name, v in chosen.items()})
        here = key_parts(src, backend, options, get_cache_invalidating_env_vars())
        differ = _differences(record, here, fn, options, same_target)
        if differ:
            raise Refused("its key comes out different here: " + "; ".join(differ))
        if same_target and key_of(here) != record["key"]:
            raise Refused("its key comes out different here (%s, recorded %s), though no part of it named differs"
                          % (key_of(here), record["key"]))
        if seen is not None:
            if key_of(here) in seen:
                return None
            seen.add(key_of(here))
        said = {}

        def listener(*, src, metadata, metadata_group, times, cache_hit):
            said["hit"] = cache_hit

        before = triton.knobs.compilation.listener
        triton.knobs.compilation.listener = listener
        start = time.monotonic()
        try:
            with driver_target(target):
                triton.compile(src, target=target, options=options.__dict__)
        except Exception as e:
            out["status"], out["reason"] = "failed", "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[-1] if str(e).strip() else "")
            return out
        finally:
            triton.knobs.compilation.listener = before
            out["ms"] = round((time.monotonic() - start) * 1000, 1)
        out["status"] = "hit" if said.get("hit") else "compiled"
    except Refused as e:
        out["status"], out["reason"] = "refused", str(e)
    return out


# ---- the command: `kiln warm --triton` (python -m kiln, the Python that has Triton)

USAGE = """usage: kiln warm --triton [--target T]... [--path DIR]... [--json] [-q]

Compiles again, through kiln's cache, the Triton kernels that runs recorded (artifacts of kind
triton-record in this node's cache: `kiln cache unpack` a bundle of them first), for each
--target, on a machine that needs no GPU (Triton's bundled ptxas makes the cubins). Then `kiln
cache pack` carries the result to the GPU nodes. A record whose key comes out different here is
refused, naming what differs (Triton's version, the kernel's source, ptxas, an option, an
environment variable); a record whose module cannot be imported is refused, saying so.

options:
  --target T   a CUDA target (repeatable: --target cuda:sm_80,sm_90; default: each record's own)
  --path DIR   a folder to import the kernels' modules from (repeatable); kiln imports a
               record's module from nowhere else
  --json       print a JSON array (one object per record and target: kernel, target, status
               hit|compiled|refused|failed, reason, ms)
  -q, --quiet  no line per record on stderr

Exit status: 0 when every record is now compiled for every target, 1 when one was refused or
failed, 2 for bad usage. Runs with the Python that has Triton (python -m kiln warm --triton)."""


def _targets(values):
    out = []
    for value in values:
        backend = None
        for part in value.split(","):
            if ":" not in part and backend:
                part = backend + ":" + part
            backend = part.split(":", 1)[0]
            out.append(parse_target(part))
    return out


def main(argv):
    parser = argparse.ArgumentParser(prog="kiln warm --triton", add_help=False)
    parser.add_argument("--target", action="append", default=[])
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    try:
        args, rest = parser.parse_known_args(argv)
    except SystemExit:
        return 2
    if args.help:
        print(USAGE)
        return 0
    if rest:
        print("kiln warm --triton: unknown arguments %s\n\n%s" % (" ".join(rest), USAGE), file=sys.stderr)
        return 2
    try:
        import kiln.triton as kt
    except ImportError as e:
        print("kiln warm --triton: %s" % e, file=sys.stderr)
        return 1
    ok, why = kt.supported()
    if not ok:
        print("kiln warm --triton: %s; run it with the Python that has the run's Triton (python -m kiln warm --triton)" % why,
              file=sys.stderr)
        return 1
    try:
        targets = _targets(args.target) or [None]
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    _ALLOWED[:] = [os.path.realpath(folder) for folder in args.path]
    for folder in reversed(args.path):
        sys.path.insert(0, os.path.abspath(folder))
    ctx, error = kt._context()
    if ctx is None:
        print("kiln warm --triton: kiln's cache cannot be used (%s)" % error, file=sys.stderr)
        return 1
    os.environ[kt.ENV] = kt.SPEC  # the compiles store their groups in kiln's cache
    results = []
    seen = set()
    found = records(ctx)
    for record in found:
        for target in targets:
            r = replay(record, target, seen)
            if r is None:
                continue
            results.append(r)
            if not args.quiet:
                line = "%-28s %-12s %-9s %8.1f ms" % (r["kernel"], r["target"], r["status"], r["ms"])
                print(line + ("  " + r["reason"] if r["reason"] else ""), file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        counts = {}
        for r in results:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        print("%d records, %d targets: %s" % (len(found), len(targets),
                                            ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items())) or "nothing to do"))
    return 0 if all(r["status"] in ("hit", "compiled") for r in results) else 1
