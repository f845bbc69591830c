"""torch.compile's own caches through kiln: what a node pays before its kernels, paid once.

    import kiln.torch.compile_cache
    kiln.torch.compile_cache.install()      # this process's torch.compile: caches, C++ and Triton
    # kiln.torch.inductor.install() and torch.compile(model, backend="kiln") turn it on too

Before a compiled model's first call, torch.compile traces it (Dynamo), makes its joint graph
and partitions it (AOTAutograd), lowers each graph to kernels (Inductor) and, under
max-autotune, benchmarks the choices. Torch keeps the results in caches of its own: the FX-graph
cache (a lowered graph: the code that calls its kernels), the AOTAutograd cache (the forward and
backward wrappers, naming their FX graphs), the autotune caches (the best config of a kernel)
and Dynamo's profile-guided cache (which dimensions turned out dynamic, under a job id). Each
has a local tier under TORCHINDUCTOR_CACHE_DIR and a "remote" tier that open-source torch
offers only through Redis, with no checks, signatures, single flight, size cap or warming.

install() makes kiln that remote tier: each entry is a kiln artifact of a kind of its own
(torch-fx-graph, torch-aot-autograd, torch-autotune, torch-bundled-autotune, torch-dynamo-pgo),
so it lives in kiln's store under its size cap, is checked on every read (a damaged entry is a
miss and is removed), goes to the cluster's tiers (signed when the cluster signs) and into
`kiln cache pack` bundles, and is found on a new node whose only warm thing is the cluster tier.

The seam is torch's own: torch._inductor.remote_cache's classes (RemoteFxGraphCache and the
rest) take their storage from `backend_override_cls` when it is set; kiln sets it to a backend
over its store and turns the remote caches on in torch's config. Torch still does all the
rest (keys, guards, serialisation), so an entry kiln hands back is exactly what torch stored.

The key. An entry is stored under torch's own key (which already holds torch's source hash,
the graph, the inputs' shapes, Inductor's config and the GPU's name) plus what torch leaves out
of it that changes the result: torch's version, and for FX graphs and AOTAutograd entries the
vector ISA Inductor picked on this CPU (its probes decide whether a CPU graph's code uses
AVX-512, AVX2 or no vector code at all, and torch's key does not say which).

Single flight. A miss of an FX graph or an AOTAutograd entry claims its key: until the graph is
stored (or the compile that claimed it ends), every other process of the node and every other
node asking for that key waits and then loads what the first one made, so N ranks starting
together lower each graph once. A claim never outlives the compile that took it (see _Scope).
Autotune results and Dynamo's profiles are not claimed (they are written after kernels run, not
at the end of a compile); the first autotune result stored stays, so every rank loads the same
choice.
"""
from . import _cache_backend
from . import inductor as _inductor
from ._cache_backend import KINDS, _KilnStore, installed, key_text, stats  # noqa: F401 (the module's API; _KilnStore for tests)

__all__ = ["install", "uninstall", "installed", "stats", "KINDS"]


def install(inductor=True, triton=None):
    """Routes torch.compile's caches in this process through kiln (idempotent; torch 2.x).

    inductor: also route Inductor's C++ builds through kiln (kiln.torch.inductor.install()).
    triton: also make kiln Triton's cache manager (kiln.triton.install()); None: when Triton is
    installed. A cache a user turned off by its own environment variable (for example
    TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=0) stays off; torch.compiler.config.force_disable_caches
    turns every one off, as it does for torch's own."""
    _cache_backend.install_caches()  # a torch without the seam raises before anything is on
    if inductor:
        _inductor.install_builds()
    if triton or (triton is None and _has_triton()):
        import kiln.triton

        kiln.triton.install()


def uninstall():
    """Gives torch.compile its own caches back (and, if install() routed them, Inductor's C++
    builds stay with kiln: kiln.torch.inductor.uninstall() gives those back)."""
    _cache_backend.uninstall_caches()


def _has_triton():
    import importlib.util

    return importlib.util.find_spec("triton") is not None
