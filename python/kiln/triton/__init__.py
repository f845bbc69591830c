"""Triton's kernel cache through kiln: one compile per kernel across processes and nodes, every
kernel's files checked on every read and published whole, remote tiers and bundles as for kiln's
own artifacts.

    import kiln.triton
    kiln.triton.install()        # or: export TRITON_CACHE_MANAGER=kiln.triton:CacheManager

install() sets TRITON_CACHE_MANAGER in this process's environment, so the processes it starts
(torch.compile's compile workers) use kiln too. Importing kiln.triton does not import Triton; the
manager class is made when Triton first asks for it.

What goes where:
- A kernel's group (the files one `triton.compile` makes: IR stages, PTX, cubin and the metadata
  JSON, or only what TRITON_STORE_BINARY_ONLY keeps) is one kiln artifact of kind `triton-group`,
  stored by put_group as a whole and handed out by get_group as real files, copies of the checked
  artifact in a folder of their own (kiln::Context::find_files). Until put_group, the files that
  put() is given are staged in a private temporary folder (<cache>/files/staging/, removed when
  the manager goes; `kiln cache gc` removes what a killed process left): no reader looks there.
- A file on its own (the autotuner's `<fn>.autotune.json`, the driver's launcher `.so`) is an
  artifact of kind `triton-file`, stored first-writer-wins: every rank reads the same timings, so
  every rank launches the same config.
- Single flight: a get_group or get_file that misses waits while another process (this node: a
  lock; other nodes: a lease on the remote tier) makes the same key, then looks again; when it
  still misses, this process holds the key until put_group/put stores it, or until the manager is
  dropped (a compile that raised), or the process exits; a process that dies loses the lock at
  once and its lease after `remote.lease` seconds (KILN_REMOTE_LEASE).

The key: Triton's own (its hash of Triton itself, the source and its dependencies, signature,
constexprs, attributes, options, ptxas version and arch, the cache-invalidating environment) with
the file name, plus what kiln knows Triton's key leaves out for a kernel:
- the target the *driver* reports in the compiling process (`triton.language.target_info.
  current_target()`): kernels may branch on it at compile time (`cuda_capability_geq`, `is_cuda`
  and the libraries built on them), and a machine without a driver sees None where a GPU node sees
  its GPU, for the same Triton key;
- the content of an `ir_override` file (Triton keys its path only).
Override and dump managers (TRITON_KERNEL_OVERRIDE, TRITON_KERNEL_DUMP) stay Triton's own folders.

Each group stored after a compile gets a record beside it (kind `triton-record`, kiln/triton/record.py:
what `triton.compile` was given), which `python -m kiln warm --triton` compiles again for a
cuda:sm_XX target on a machine with no GPU; KILN_TRITON_RECORD=0 records nothing.

Where kiln cannot serve (Triton too old or too new, its CacheManager interface changed, or kiln's
cache cannot be opened) a warning says so once and Triton's own FileCacheManager does the work.
"""
import atexit
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import warnings
import weakref

from . import record as _records

# CacheManager is left out: `from kiln.triton import *` must not import Triton.
__all__ = ["install", "uninstall", "supported", "GROUP_KIND", "FILE_KIND"]

ENV = "TRITON_CACHE_MANAGER"
SPEC = "kiln.triton:CacheManager"
GROUP_KIND = "triton-group"
FILE_KIND = "triton-file"
# Bump when what enters kiln's key changes.
_SCHEMA = "kiln-triton 1"
# The Triton versions whose cache interface this module speaks ([first, last] major.minor), and
# the interface it expects (triton/runtime/cache.py: the abstract methods of CacheManager).
_FIRST, _LAST = (3, 0), (3, 9)
_INTERFACE = {"get_file", "put", "get_group", "put_group"}


def _version_tuple(text):
    out = []
    for part in str(text).split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out + [0] * (2 - len(out)))


def _installed_version():
    """Triton's version without importing it (None when it is not installed)."""
    if "triton" in sys.modules and hasattr(sys.modules["triton"], "__version__"):
        return sys.modules["triton"].__version__
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        from importlib import metadata
        return metadata.version("triton")
    except Exception:  # installed without metadata (a source build): ask the package itself
        import triton
        return triton.__version__


def supported(check_interface=True):
    """(True, "") when kiln can be Triton's cache here, else (False, why not). Imports Triton only
    to check its interface (check_interface), when its version is one kiln speaks."""
    version = _installed_version()
    if version is None:
        return False, "Triton is not installed"
    v = _version_tuple(version)
    if v < _FIRST:
        return False, "Triton %s is older than %d.%d, the first whose cache kiln can serve" % ((version,) + _FIRST)
    if v > _LAST:
        return False, "Triton %s is newer than %d.%d, the last whose cache interface kiln was tested with" % ((version,) + _LAST)
    if not check_interface:
        return True, ""
    try:
        from triton.runtime import cache
    except Exception as e:  # a broken install
        return False, "Triton %s does not import (%s: %s)" % (version, type(e).__name__, e)
    base = getattr(cache, "CacheManager", None)
    abstract = set(getattr(base, "__abstractmethods__", ()) or ())
    if base is None or abstract != _INTERFACE or not hasattr(cache, "FileCacheManager"):
        return False, ("Triton %s's CacheManager interface is not the one kiln speaks (abstract methods %s, expected %s)" %
                       (version, sorted(abstract), sorted(_INTERFACE)))
    return True, ""


def _recording():
    """Whether compiles are recorded for `kiln warm --triton` (KILN_TRITON_RECORD=0: not)."""
    return os.environ.get("KILN_TRITON_RECORD", "1") not in ("0", "false", "no", "off")


_warned = set()
_warn_lock = threading.Lock()


def _warn_once(what, message):
    with _warn_lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn("kiln.triton: " + message, RuntimeWarning, stacklevel=3)


def install():
    """Makes kiln Triton's cache in this process and the processes it starts (it sets
    TRITON_CACHE_MANAGER=kiln.triton:CacheManager). Returns True; False, with a warning said
    once, where kiln cannot serve this Triton (then nothing changes). It reads Triton's version
    without importing Triton; its interface is checked when Triton first makes a manager (one it
    does not match is said once there, and Triton's own FileCacheManager does the work)."""
    ok, why = supported(check_interface=False)
    if not ok:
        _warn_once("unsupported", why + "; Triton keeps its own cache")
        return False
    os.environ[ENV] = SPEC
    return True


def uninstall():
    """Gives Triton its own cache back (unsets TRITON_CACHE_MANAGER when it names kiln)."""
    if os.environ.get(ENV) == SPEC:
        del os.environ[ENV]


# ---- claims this process holds, by (kind, key): (claim, owner token)

_claims = {}
_claims_lock = threading.Lock()


def _adopt(kind, key, token):
    """A claim on (kind, key) that this process holds already (a compile that raised, whose
    manager is not collected yet): the new attempt takes it over instead of waiting on its own
    lock."""
    with _claims_lock:
        entry = _claims.get((kind, key))
        if entry is None or not entry[0].held:
            return None
        _claims[(kind, key)] = (entry[0], token)
        return entry[0]


def _record(kind, key, claim, token):
    with _claims_lock:
        _claims[(kind, key)] = (claim, token)


def _forget(kind, key, token):
    """The claim of (kind, key) if `token` still owns it, out of the table (None otherwise)."""
    with _claims_lock:
        entry = _claims.get((kind, key))
        if entry is None or entry[1] is not token:
            return None
        del _claims[(kind, key)]
        return entry[0]


def _release_owned(keys, token):
    # A manager that goes (its compile raised, or it never stored) lets the waiters go.
    for kind, key in list(keys):
        claim = _forget(kind, key, token)
        if claim is not None:
            claim.release()
    keys.clear()


@atexit.register
def _release_all():
    # Before kiln's contexts close (atexit runs this first: kiln.triton registers after kiln).
    with _claims_lock:
        held = [entry[0] for entry in _claims.values()]
        _claims.clear()
    for claim in held:
        claim.release()


_native = None
_native_error = None
_native_lock = threading.Lock()


def _context():
    """kiln's native Context for the cache (no accelerator), or the reason it cannot be had."""
    global _native, _native_error
    with _native_lock:
        if _native is None and _native_error is None:
            try:
                import kiln
                ctx = kiln.context("none")._ctx
                if not ctx.cache_dir:
                    raise RuntimeError("it could not be opened (see kiln's warning above)")
                _native = ctx
            except Exception as e:
                _native_error = "%s: %s" % (type(e).__name__, e)
        return _native, _native_error


# ---- what Triton's key leaves out

_no_driver = None  # what _driver_target answered while no driver was set in this process


def _driver_target():
    """The target the active driver reports here ("cuda:90:32"), or "none" on a machine without a
    driver: what `tl.target_info` answers a kernel at compile time."""
    global _no_driver
    try:
        from triton.runtime.driver import driver
        unset = getattr(driver, "_active", 0) is None and getattr(driver, "_default", 0) is None
    except Exception:
        unset = False
    # With no driver set, Triton tries to start one on every call (and fails again on a machine
    # without a GPU): once is enough for a process, and a hit spares the ~7 us. A driver set
    # since (a real one, or kiln warm's) is asked each time.
    if not unset:
        return _target_text()
    if _no_driver is None:
        _no_driver = _target_text()
    return _no_driver


def _target_text():
    try:
        from triton.language import target_info
        t = target_info.current_target()
    except Exception as e:  # a driver that fails to start answers like none, but not the same key
        return "error:" + type(e).__name__
    if t is None:
        return "none"
    return "%s:%s:%s" % (t.backend, t.arch, t.warp_size)


def _always_compile():
    try:
        from triton import knobs
        return bool(knobs.compilation.always_compile)
    except Exception:
        return False


def _file_digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return "unreadable:" + type(e).__name__


def _as_bytes(data):
    return data if isinstance(data, bytes) else str(data).encode("utf-8")


def _target_of(metadata_json):
    try:
        t = json.loads(metadata_json)["target"]
        if t["backend"] == "cuda":
            return "cuda:sm_%s" % t["arch"]
        return "%s:%s" % (t["backend"], t["arch"])
    except Exception:
        return ""


# (Triton's key, file name, driver target) -> kiln's key text of that group: a hit joins nothing.
_key_texts = {}


def _clocks():
    """(wall, this thread's CPU, child processes' CPU) now, in seconds."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic(), time.thread_time(), children.ru_utime + children.ru_stime


def _elapsed(started):
    """(wall ms, CPU ms) since _clocks() gave `started`."""
    now = _clocks()
    return (now[0] - started[0]) * 1000, ((now[1] - started[1]) + (now[2] - started[2])) * 1000


def _private_folder(root, *parts):
    """root/parts..., each folder made 0700 (os.makedirs' mode reaches the last one only)."""
    path = root
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    return path


def _make_class():
    ok, why = supported()
    from triton.runtime import cache as triton_cache
    import triton

    if not ok:
        class FallbackCacheManager(triton_cache.FileCacheManager):
            """Triton's own FileCacheManager: kiln cannot serve this Triton."""

            def __init__(self, key, override=False, dump=False):
                _warn_once("unsupported", why + "; Triton keeps its own cache")
                super().__init__(key, override=override, dump=dump)

        FallbackCacheManager.__name__ = FallbackCacheManager.__qualname__ = "CacheManager"
        return FallbackCacheManager

    toolchain = "triton " + triton.__version__

    class KilnCacheManager(triton_cache.CacheManager):
        """Triton's cache over kiln's store (see the module's documentation)."""

        def __init__(self, key, override=False, dump=False):
            self.key = key
            self._files = None  # Triton's own manager, for what kiln does not keep
            if override or dump:
                self._files = triton_cache.FileCacheManager(key, override=override, dump=dump)
                return
            ctx, error = _context()
            if ctx is None:
                _warn_once("no-cache", "kiln's cache cannot be used (%s); Triton keeps its own cache" % error)
                self._files = triton_cache.FileCacheManager(key)
                return
            self._ctx = ctx
            inputs = _records.compile_inputs(2)  # what the triton.compile asking was given, or None
            self._options = inputs.get("options") if inputs else None
            self._inputs = inputs if inputs and _recording() else None  # for the record of a compile
            self._group_keys = {}  # filename -> kiln key of its group, fixed at get_group
            self._staged = {}      # name -> (path, bytes) put for the group being compiled
            self._compiling = set()  # group filenames that missed here: their puts are staged
            self._started = {}
            self._stage_dir = None
            self._token = object()  # owns this manager's claims in the process's table
            self._held = set()      # (kind, key) claimed here; released when the manager goes (_hold)
            self._releases = None

        # -- keys
        def _group_key(self, filename):
            key = self._group_keys.get(filename)
            if key is None:
                target = _driver_target()
                override = getattr(self._options, "ir_override", None)
                memo = None if override else (self.key, filename, target)  # an override's content is read each time
                key = _key_texts.get(memo) if memo else None
                if key is None:
                    parts = [_SCHEMA, "group", self.key, filename, "driver-target=" + target]
                    if override:
                        parts.append("ir-override=" + _file_digest(override))
                    key = " | ".join(parts)  # printable: `kiln cache show` shows it
                    if memo:
                        if len(_key_texts) >= 4096:
                            _key_texts.clear()
                        _key_texts[memo] = key
                self._group_keys[filename] = key
            return key

        def _file_key(self, filename):
            return " | ".join([_SCHEMA, "file", self.key, filename])

        def _claim(self, kind, key):
            """The files when found (perhaps after waiting for their maker); None when this
            process is to make them (it then holds the key)."""
            if _adopt(kind, key, self._token) is not None:
                self._hold(kind, key)
                return None
            try:
                found, claim = self._ctx.find_or_claim_files(kind, key)
            except Exception as e:  # the cache failed (not a miss): Triton compiles as before
                _warn_once("lookup", "a lookup in kiln's cache failed (%s); compiling" % e)
                return None
            if found is not None:
                return dict(found["files"])
            _record(kind, key, claim, self._token)
            self._hold(kind, key)
            return None

        def _hold(self, kind, key):
            # Made on a manager's first claim only: a hit (most managers) holds nothing.
            if self._releases is None:
                self._releases = weakref.finalize(self, _release_owned, self._held, self._token)
            self._held.add((kind, key))

        def _take_back(self, kind, key):
            """This manager's claim on (kind, key), out of the table, for store_files to end."""
            self._held.discard((kind, key))
            return _forget(kind, key, self._token)

        # -- Triton's interface
        def get_group(self, filename):
            if self._files is not None:
                return self._files.get_group(filename)
            files = self._claim(GROUP_KIND, self._group_key(filename))
            if files is not None:
                if _always_compile():  # Triton compiles anyway: its files are a group again
                    self._compiling.add(filename)
                return files
            self._compiling.add(filename)
            self._started[filename] = _clocks()
            return None

        def put_group(self, filename, group):
            if self._files is not None:
                return self._files.put_group(filename, group)
            key = self._group_key(filename)
            files = []
            for name, path in group.items():
                staged = self._staged.get(name)
                if staged is not None and staged[0] == path:
                    files.append((name, staged[1]))
                else:  # a file this manager did not stage: take it as it is now
                    with open(path, "rb") as f:
                        files.append((name, f.read()))
            claim = self._take_back(GROUP_KIND, key)
            started = self._started.pop(filename, None)
            # What the compile cost from get_group's miss to here: wall time, and the CPU time of
            # this thread and of the processes it ran (ptxas), named apart (kiln cache stats).
            wall_ms, cpu_ms = _elapsed(started) if started is not None else (0.0, 0.0)
            label = filename[:-5] if filename.endswith(".json") else filename
            target = _target_of(dict(files).get(filename, b"{}"))
            self._compiling.discard(filename)
            try:
                stored = self._ctx.store_files(GROUP_KIND, key, files, label=label, target=target, toolchain=toolchain,
                                               compile_ms=wall_ms, compile_cpu_ms=cpu_ms, claim=claim)
            except Exception as e:  # a full disk: the kernel runs from its staged files, kept until the manager goes
                _warn_once("store", "kiln could not store a Triton kernel (%s); it will compile again" % e)
                return group.get(filename)
            paths = dict(stored["files"])
            if self._inputs is not None:
                self._record(filename)
            # The compile goes on with the stored copies (CompiledKernel reads them next).
            for name in group:
                group[name] = paths[name]
            self._clear_stage()
            return paths.get(filename)

        def _record(self, filename):
            # What `kiln warm --triton` compiles again (kiln/triton/record.py); a record that cannot
            # be stored costs the run nothing but the warning.
            try:
                record = _records.make_record(self._inputs, self.key, filename, _driver_target())
                _records.store_record(self._ctx, record, toolchain)
            except Exception as e:
                _warn_once("record", "kiln could not record a Triton compile for `kiln warm --triton` (%s: %s)"
                           % (type(e).__name__, e))
            finally:
                self._inputs = None

        def get_file(self, filename):
            if self._files is not None:
                return self._files.get_file(filename)
            staged = self._staged.get(filename)
            if staged is not None:  # a stage of the compile under way (TRITON_USE_IR_LOC)
                return staged[0]
            files = self._claim(FILE_KIND, self._file_key(filename))
            return None if files is None else files.get(filename)

        def put(self, data, filename, binary=True):
            if self._files is not None:
                return self._files.put(data, filename, binary=binary)
            data = _as_bytes(data)
            if self._compiling:
                return self._stage(filename, data)
            key = self._file_key(filename)
            claim = self._take_back(FILE_KIND, key)
            try:
                stored = self._ctx.store_files(FILE_KIND, key, [(filename, data)], label=filename, toolchain=toolchain,
                                               claim=claim, keep_first=True)
            except Exception as e:
                _warn_once("store", "kiln could not store a Triton file (%s); it will be made again" % e)
                return self._stage(filename, data)
            return dict(stored["files"])[filename]

        # -- staging of a group's files until put_group
        def _stage(self, filename, data):
            if self._stage_dir is None:
                # Private to this manager, inside the cache so that `kiln cache gc` removes what a
                # killed process left (a name with ".tmp.", an hour old) and the cap counts it.
                parent = _private_folder(self._ctx.cache_dir, "files", "staging")
                self._stage_dir = tempfile.mkdtemp(prefix="triton-", suffix=".tmp.%d" % os.getpid(), dir=parent)
                self._stage_finalizer = weakref.finalize(self, shutil.rmtree, self._stage_dir, True)
            if "/" in filename or filename in ("", ".", ".."):
                raise ValueError("kiln.triton: %r is not a plain file name" % (filename,))
            path = os.path.join(self._stage_dir, filename)
            with open(path, "wb") as f:
                f.write(data)
            self._staged[filename] = (path, data)
            return path

        def _clear_stage(self):
            self._staged.clear()
            if self._stage_dir is not None:
                self._stage_finalizer()
                self._stage_dir = None

    KilnCacheManager.__name__ = KilnCacheManager.__qualname__ = "CacheManager"
    return KilnCacheManager


_class = None
_class_lock = threading.Lock()


def __getattr__(name):
    # kiln.triton.CacheManager is made on first use (Triton's knobs read it by name), so that
    # importing kiln.triton never imports Triton.
    global _class
    if name == "CacheManager":
        with _class_lock:
            if _class is None:
                _class = _make_class()
                globals()["CacheManager"] = _class  # later lookups (Triton's knobs, on every compile) skip this function
            return _class
    raise AttributeError("module 'kiln.triton' has no attribute %r" % (name,))
