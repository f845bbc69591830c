"""What kiln.torch.compile_cache turns on: torch.compile's caches over kiln's store and tiers.

The design (keys, single flight, the seam in torch) is told in kiln.torch.compile_cache's
docstring. This module holds the caches alone and imports neither kiln.torch.compile_cache
nor kiln.torch.inductor, so both can turn the caches on (each turns on the other's route too).
"""
import functools
import logging
import os
import re
import threading


_log = logging.getLogger("kiln.compile_cache")

# torch's remote-cache class -> (kiln's artifact kind, a miss claims the key, the first stored
# entry stays).
KINDS = {
    "RemoteFxGraphCache": ("torch-fx-graph", True, False),
    "RemoteAOTAutogradCache": ("torch-aot-autograd", True, False),
    "RemoteAutotuneCache": ("torch-autotune", False, True),
    "RemoteBundledAutotuneCache": ("torch-bundled-autotune", False, True),
    "RemoteDynamoPGOCache": ("torch-dynamo-pgo", False, False),
}
# The kinds whose entries are a compile's output (a lowering is a compile, DESIGN.md); autotune
# results and Dynamo's profiles are measurements, stored but not counted as compiles.
_COMPILES = ("torch-fx-graph", "torch-aot-autograd")
# The kinds whose entries hold code generated for this CPU's vector ISA.
_ISA_KINDS = ("torch-fx-graph", "torch-aot-autograd")
_ENTRY = "entry.json"  # the one file of each stored group: the bytes torch's serde made
_SCHEMA = "kiln-torch-cache 1"

_lock = threading.Lock()
_installed = None  # {"classes": {...}, "config": [(module, name, old value)], "patched": [...]}
_stats = {}
_warned = set()


def _count(kind, what, n=1):
    with _lock:
        per = _stats.setdefault(kind, {"hits": 0, "hits_remote": 0, "misses": 0, "stored": 0, "claimed": 0,
                                       "claims_released_unused": 0, "errors": 0})
        per[what] += n


def _warn_once(topic, message):
    with _lock:
        if topic in _warned:
            return
        _warned.add(topic)
    _log.warning("kiln.torch.compile_cache: %s", message)


@functools.lru_cache(maxsize=None)
def _torch_version():
    import torch

    return torch.__version__


@functools.lru_cache(maxsize=None)
def _backend_class():
    from torch._inductor.remote_cache import RemoteCacheBackend

    return type("KilnRemoteCacheBackend", (_KilnStore, RemoteCacheBackend), {})


@functools.lru_cache(maxsize=None)
def _vector_isa():
    """The vector ISA Inductor picked here ("avx512", "avx2", "" for none), as its CPU codegen
    sees it. Asked once per process (Inductor caches its own answer too)."""
    try:
        from torch._inductor import cpu_vec_isa

        isa = cpu_vec_isa.pick_vec_isa()
        width = isa.bit_width() if callable(getattr(isa, "bit_width", None)) else "?"
        return "%s/%s" % (isa or "none", width)
    except Exception as e:  # a torch without the module, or probes that fail: say so in the key
        return "unknown (%s)" % type(e).__name__


def key_text(kind, torch_key):
    """What kiln stores an entry under: torch's key plus what changes the result that torch's key
    leaves out (see the module's doc)."""
    parts = [_SCHEMA, kind, "torch " + _torch_version()]
    if kind in _ISA_KINDS:
        parts.append("vec-isa " + _vector_isa())
    parts.append(torch_key)
    return " | ".join(parts)


class _Scope:
    """Claims a compile took, released when the outermost compile on this thread ends.

    A claim is normally ended by the put of its entry. Torch may look an entry up and never
    store one (a graph it cannot serialise, a compile that raises, an AOTAutograd entry whose
    backward is compiled lazily, after the forward's compile returned): such a claim would keep
    the other ranks waiting until kiln's lock timeout. So every claim belongs to the outermost
    compile running on its thread (Inductor's compile_fx, or _compile_fx_inner for a backward
    compiled at its first call), and what is still held when that compile returns or raises is
    released: a waiter then looks again and, finding nothing, makes the entry itself."""

    _local = threading.local()

    @classmethod
    def held(cls):
        return getattr(cls._local, "claims", None)

    @classmethod
    def wrap(cls, fn):
        @functools.wraps(fn)
        def scoped(*args, **kwargs):
            if cls.held() is not None:
                return fn(*args, **kwargs)  # an inner compile: the outermost one releases
            cls._local.claims = {}
            try:
                return fn(*args, **kwargs)
            finally:
                left, cls._local.claims = cls._local.claims, None
                for (kind, _), claim in left.items():
                    if claim.held:
                        claim.release()
                        _count(kind, "claims_released_unused")

        scoped.__kiln_scoped__ = fn
        return scoped


class _KilnStore:
    """The storage of torch's remote caches in kiln's store: bytes in, bytes out, under key_text().
    Mixed into torch's RemoteCacheBackend at install (_backend_class), whose get/put wrap these
    with torch's own stats."""

    def __init__(self, kind, claims, keep_first):
        super().__init__()
        self._name = "backend:kiln:" + kind
        self.kind, self.claims, self.keep_first = kind, claims, keep_first

    def _get(self, key):
        from .. import KilnError, context

        text = key_text(self.kind, key)
        claims = _Scope.held()
        try:
            ctx = context("none")
            if self.claims and claims is not None and (self.kind, text) not in claims:
                group, claim = ctx.find_or_claim_files(self.kind, text)
                if claim is not None:
                    if claim.held:
                        claims[(self.kind, text)] = claim
                        _count(self.kind, "claimed")
            else:
                group = ctx.find_files(self.kind, text)
        except KilnError as e:
            _count(self.kind, "errors")
            _warn_once("get", "a %s lookup failed, compiling instead: %s" % (self.kind, e))
            return None
        if group is None:
            _count(self.kind, "misses")
            return None
        path = dict(group["files"]).get(_ENTRY)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except (OSError, TypeError) as e:
            _count(self.kind, "errors")
            _warn_once("read", "a stored %s entry could not be read, compiling instead: %s" % (self.kind, e))
            return None
        _count(self.kind, "hits_remote" if group.get("cache_source") == "remote" else "hits")
        return data

    def _put(self, key, data):
        from .. import KilnError, context

        text = key_text(self.kind, key)
        claims = _Scope.held()
        claim = claims.pop((self.kind, text), None) if claims is not None else None
        data = bytes(data)
        try:
            context("none").store_files(self.kind, text, [(_ENTRY, data)], label=_label(self.kind, key),
                                        toolchain="torch " + _torch_version(), compile_ms=_time_taken_ms(data),
                                        claim=claim, keep_first=self.keep_first, compiled=self.kind in _COMPILES)
        except KilnError as e:
            _count(self.kind, "errors")
            _warn_once("put", "a %s entry could not be stored (this run goes on; the next one compiles it again): %s"
                       % (self.kind, e))
            if claim is not None and claim.held:
                claim.release()
            return
        _count(self.kind, "stored")


_TIME_TAKEN = re.compile(rb'"time_taken_ms":\s*(\d+)')


def _time_taken_ms(data):
    """What making the entry cost, when torch wrote it into the entry (FX graphs, AOTAutograd)."""
    found = _TIME_TAKEN.search(data[-256:])
    return float(found.group(1)) if found else 0.0


def _label(kind, key):
    """The op column of `kiln cache list`: torch's cache id and the start of its key."""
    found = re.match(r"pt2:([^:]*)::(.*):c\d+$", key)
    if found:
        return "%s %s" % (found.group(1)[:40], found.group(2)[:24])
    return key[:64]


def _env_off(name):
    return os.environ.get(name) == "0"


def install_caches():
    """Routes torch.compile's caches in this process through kiln (idempotent; torch 2.x)."""
    global _installed
    from .. import KilnError

    try:
        from torch._inductor import remote_cache
    except ImportError as e:
        raise KilnError("kiln.torch.compile_cache needs torch 2.x with Inductor: %s" % e) from None
    with _lock:
        if _installed is not None:
            return
    missing = [name for name in KINDS if not hasattr(getattr(remote_cache, name, None), "backend_override_cls")]
    if missing:
        raise KilnError("this torch (%s) has no backend_override_cls on %s in torch._inductor.remote_cache, the seam "
                        "kiln.torch.compile_cache uses; torch.compile's caches stay torch's own"
                        % (_torch_version(), ", ".join(missing)))
    state = {"classes": {}, "config": [], "patched": []}
    for name, (kind, claims, keep_first) in KINDS.items():
        cls = getattr(remote_cache, name)
        state["classes"][name] = cls.__dict__.get("backend_override_cls", _UNSET)
        cls.backend_override_cls = functools.partial(_backend_class(), kind, claims, keep_first)
    _turn_on(state["config"])
    _wrap_compiles(state["patched"])
    with _lock:
        _installed = state
    _log.debug("torch.compile's caches go through kiln (%s)", ", ".join(k for k, _, _ in KINDS.values()))


_UNSET = object()


def _turn_on(saved):
    """Torch's switches for its remote caches, on (kept as they were where the user said 0)."""
    import torch
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    switches = [
        (inductor_config, "fx_graph_cache", "TORCHINDUCTOR_FX_GRAPH_CACHE"),
        (inductor_config, "fx_graph_remote_cache", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"),
        (functorch_config, "enable_autograd_cache", "TORCHINDUCTOR_AUTOGRAD_CACHE"),
        (functorch_config, "enable_remote_autograd_cache", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE"),
    ]
    # Autotune results are Triton's (GPU kernels), kept per kernel. Torch's bundled autotune cache
    # (one entry per graph) is left as the user set it: with no GPU torch has no backend hash to
    # key a graph's bundle by, and turned on it asserts on the first CPU graph (torch 2.15); a user
    # who turns it on gets it through kiln too.
    if torch.cuda.is_available():
        switches.append((inductor_config, "autotune_remote_cache", "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE"))
    switches += [
        # Dynamo's profiles are kept under a job id (torch.compiler.config.job_id,
        # TORCH_COMPILE_JOB_ID): without one torch keeps none, remote or local.
        (torch._dynamo.config, "automatic_dynamic_remote_pgo", "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO"),
    ]
    for module, name, env in switches:
        if not hasattr(module, name):
            continue
        if _env_off(env):
            _log.debug("%s=0: torch's %s stays off", env, name)
            continue
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, True)


def _wrap_compiles(patched):
    """The scopes that release unused claims (see _Scope)."""
    from torch._inductor import compile_fx

    for name in ("compile_fx", "_compile_fx_inner"):
        fn = getattr(compile_fx, name, None)
        if fn is None or hasattr(fn, "__kiln_scoped__"):
            continue
        setattr(compile_fx, name, _Scope.wrap(fn))
        patched.append((compile_fx, name, fn))


def uninstall_caches():
    """Gives torch.compile its own caches back."""
    global _installed
    with _lock:
        state, _installed = _installed, None
    if state is None:
        return
    from torch._inductor import remote_cache

    for name, old in state["classes"].items():
        cls = getattr(remote_cache, name)
        if old is _UNSET:
            if "backend_override_cls" in cls.__dict__:
                del cls.backend_override_cls
        else:
            cls.backend_override_cls = old
    for module, name, old in reversed(state["config"]):
        setattr(module, name, old)
    for module, name, fn in reversed(state["patched"]):
        setattr(module, name, fn)


def installed():
    return _installed is not None


def stats():
    """Per kind, since the process started: entries found here ("hits") or on a remote tier
    ("hits_remote"), "misses", entries "stored", keys "claimed" (this process made them while
    others waited), claims released with nothing stored ("claims_released_unused") and kiln
    errors that fell back to compiling ("errors")."""
    with _lock:
        return {kind: dict(per) for kind, per in _stats.items()}
