"""kiln from Python: kiln's ops on tensors, torch C++ extensions built in-process, DeepSpeed's
op builders through kiln.

    import kiln
    add = kiln.op("vector_add")                 # found by name; compiled on first use, cached
    add(a, b, out, a.numel())                   # launched as its spec says, sized to the device
    add(a, b, out, a.numel(), grid=kiln.cdiv(a.numel(), 256), block=256)   # or as you say

    import kiln.torch                            # drop-in for torch.utils.cpp_extension
    ext = kiln.torch.load("lltm", ["lltm.cpp"])

Importing kiln imports neither torch nor a compiler: the compiler is loaded on the first cache
miss, torch only by kiln.torch and by ops called with tensors.
"""
import atexit
import os
import threading

from . import _kiln

__all__ = ["KilnError", "Context", "Op", "context", "op", "op_from_spec", "cdiv", "accelerator"]


class KilnError(RuntimeError):
    """What every kiln call raises. `code` is one word ("not_found", "invalid_argument",
    "compile_error", "unavailable", ...); `diagnostics` the compiler's messages as dicts with
    severity, file, line, column and message."""

    code = "unknown"
    diagnostics = ()


_kiln._set_error_type(KilnError)


def cdiv(n, block):
    """Blocks of `block` needed to cover n items."""
    return (int(n) + int(block) - 1) // int(block)


_INTEGER_TYPES = frozenset(("int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t"))


class Op:
    """An op of a Context, callable on tensors or arrays.

    op(*args, grid=None, block=None, shared_bytes=None, entry="", sync=None) launches an entry
    point (the first one unless `entry` names another). With no grid, the launch is the one the
    op's spec gives for the sizes among the arguments (its integer parameters by name; on CUDA
    the spec's [cuda] block and grid, sized to the device): see launch_shape. With a grid, block
    defaults to 256 and shared_bytes to 0. Tensor arguments must be contiguous, on the Context's
    device and of the parameter's dtype; numbers are converted to the parameter's type. On the
    CPU the call returns when the kernel is done (sync=True), as a torch op does; pass
    sync=False to queue it and call Context.synchronize() later."""

    __slots__ = ("_op", "_sync", "_block", "_sizes_of", "_shapes")

    def __init__(self, native, default_sync, default_block):
        self._op = native
        self._sync = default_sync
        self._block = default_block
        self._sizes_of = {}  # entry -> the positions and names of its integer parameters
        self._shapes = {}  # (entry, block, sizes) -> (grid, block, shared_bytes)

    @property
    def name(self):
        return self._op.name

    @property
    def target(self):
        return self._op.target

    @property
    def entries(self):
        return self._op.entries

    def params(self, entry=""):
        """[(type, name), ...] of an entry point, as its spec declares them."""
        return self._op.params(entry)

    def build(self):
        """Compiles the op now (or finds it in the cache) and loads it."""
        self._op.build()
        return self

    @property
    def cache_source(self):
        """Where its code came from once built: memory, disk, remote or compiled."""
        return self._op.cache_source

    def launch_shape(self, entry="", block=None, **sizes):
        """(grid, block, shared_bytes) of the launch the op's spec gives for these sizes, named as
        its dims and integer parameters (op.launch_shape(n=1 << 20)); block replaces the spec's."""
        return tuple(self._op.launch_shape({k: int(v) for k, v in sizes.items()}, 0 if block is None else int(block)))

    def __call__(self, *args, grid=None, block=None, shared_bytes=None, entry="", sync=None, stream=None):
        if grid is None:
            sizes = self._sizes_of.get(entry)
            if sizes is None:
                sizes = tuple((i, name) for i, (kind, name) in enumerate(self._op.params(entry)) if kind in _INTEGER_TYPES)
                self._sizes_of[entry] = sizes
            # Remembered per size: a launch of a size seen before evaluates no expression.
            key = (entry, block) + tuple(int(args[i]) for i, _ in sizes if i < len(args))
            shape = self._shapes.get(key)
            if shape is None:
                if len(self._shapes) > 4096:
                    self._shapes.clear()
                shape = self._op.launch_shape({name: int(args[i]) for i, name in sizes if i < len(args)},
                                              0 if block is None else int(block))
                self._shapes[key] = shape
            grid, block = shape[0], shape[1]
            if shared_bytes is None:
                shared_bytes = shape[2]
        self._op.launch(grid, self._block if block is None else block, *args, shared_bytes=shared_bytes or 0, entry=entry,
                        sync=self._sync if sync is None else sync, stream=stream)

    launch = __call__

    def __repr__(self):
        return "<kiln.Op %s for %s>" % (self.name, self.target)


class Context:
    """An accelerator, the spec folders and the cache (kiln::Context). One per process is usual:
    kiln.context() gives the shared one."""

    def __init__(self, accelerator="", cache_dir="", spec_dirs=()):
        self._ctx = _kiln.Context(accelerator=accelerator, cache_dir=os.fspath(cache_dir) if cache_dir else "",
                                  spec_dirs=[os.fspath(d) for d in spec_dirs])

    @property
    def accelerator(self):
        return self._ctx.accelerator

    @property
    def native_target(self):
        return self._ctx.native_target

    @property
    def cache_dir(self):
        """The cache folder in use; "" when it could not be opened (then nothing is kept)."""
        return self._ctx.cache_dir

    def _wrap(self, native):
        return Op(native, self.accelerator != "cuda", 256)

    def op(self, name, target=""):
        """The op of that name from the spec folders (KilnError "not_found" naming them)."""
        return self._wrap(self._ctx.op(name, target))

    def op_from_spec(self, toml, base_dir=".", target=""):
        """An op from spec text, or from the path of a .toml file."""
        text = os.fspath(toml)
        if text.endswith(".toml") and os.path.isfile(text):
            base_dir = os.path.dirname(os.path.abspath(text))
            with open(text, encoding="utf-8") as f:
                text = f.read()
        return self._wrap(self._ctx.op_from_spec(text, os.fspath(base_dir), target))

    def synchronize(self):
        """Waits for every stream of the accelerator."""
        self._ctx.synchronize()

    # The accelerator interface, named as DeepSpeed's accelerator and torch.cuda name it.
    def device_count(self):
        return self._ctx.device_count()

    def device_name(self, device=0):
        return self._ctx.device_name(device)

    def current_device(self):
        return self._ctx.current_device()

    def memory_stats(self):
        """{"allocated_bytes", "max_allocated_bytes", "reserved_bytes", "max_reserved_bytes",
        "total_bytes", "available_bytes"} of the device's memory as kiln allocated it."""
        m = self._ctx.memory_stats()
        return {"allocated_bytes": m.allocated, "max_allocated_bytes": m.max_allocated, "reserved_bytes": m.reserved,
                "max_reserved_bytes": m.max_reserved, "total_bytes": m.total, "available_bytes": m.available}

    def reset_peak_memory_stats(self):
        self._ctx.reset_peak_memory()

    def supported_dtypes(self):
        return self._ctx.supported_dtypes()

    def supports(self, capability):
        """True when the accelerator has `capability` ("graphs", "event_timing", "pinned_memory",
        "float16", "bfloat16", "multi_device", "graph_events", "external_profiler")."""
        return self._ctx.unsupported_reason(capability) == ""

    def unsupported_reason(self, capability):
        return self._ctx.unsupported_reason(capability)

    def communication_backend_name(self):
        return self._ctx.communication_backend()

    def Stream(self):  # noqa: N802 (torch.cuda.Stream's spelling)
        """A new in-order queue; ops take it as op(..., stream=s)."""
        return self._ctx.create_stream()

    def wrap_stream(self, native):
        """A framework's stream (an address: torch.cuda.current_stream().cuda_stream)."""
        return self._ctx.wrap_stream(int(native))

    def Event(self):  # noqa: N802
        return self._ctx.create_event()

    def build_library(self, name, sources, **options):
        """A host shared library through kiln's pipeline (kiln::Context::build_library): returns a
        dict with path, key, cache_source, compile_ms, total_ms, log, warnings."""
        return self._ctx.build_library(name, [os.fspath(s) for s in sources], **options)

    # Groups of files another compiler made, kept under the caller's key (kiln::Context::
    # find_files and the rest; kiln.triton is their user). A group is a dict with key, folder,
    # files ([(name, path)]: real files, copies of the checked artifact) and cache_source.
    def find_files(self, kind, key):
        """The stored group of `kind` ("triton-group") under `key` (text), or None."""
        return self._ctx.find_files(kind, key)

    def find_or_claim_files(self, kind, key):
        """(group, None) when stored (perhaps after waiting while another process or node made
        it), else (None, claim): make it, then store_files(..., claim=claim), or claim.release()."""
        return self._ctx.find_or_claim_files(kind, key)

    def list_files(self, kind):
        """Every stored group of `kind` in this node's store (not the tiers'), as find_files gives them."""
        return self._ctx.list_files(kind)

    def store_files(self, kind, key, files, label="", target="", toolchain="", compile_ms=0.0, claim=None,
                    keep_first=False, compile_cpu_ms=0.0, compiled=True):
        """Stores [(name, bytes)] as one artifact, publishes it, ends `claim`; keep_first: a group
        stored already stays and is returned (first writer wins). compile_ms / compile_cpu_ms: what
        making it cost in wall and CPU time; compiled=False for what is not a compile's output (it is
        then not counted as a compile). Returns the stored group."""
        return self._ctx.store_files(kind, key, [(n, bytes(d)) for n, d in files], label=label, target=target,
                                     toolchain=toolchain, compile_ms=compile_ms, claim=claim, keep_first=keep_first,
                                     compile_cpu_ms=compile_cpu_ms, compiled=compiled)


_lock = threading.Lock()
_contexts = {}


def context(accelerator=""):
    """The process's shared Context for `accelerator` ("" = KILN_ACCELERATOR or the best here;
    "none" = one that only builds libraries)."""
    with _lock:
        ctx = _contexts.get(accelerator)
        if ctx is None:
            ctx = _contexts[accelerator] = Context(accelerator)
        return ctx


@atexit.register
def _close_contexts():
    # A Context's destructor finishes its work: precompiled headers being built are stored and
    # artifacts queued for the remote tiers are published. The interpreter would not run it.
    with _lock:
        _contexts.clear()


class _OpByDevice:
    """What kiln.op(name) returns: the op on the accelerator its arguments live on. Host arrays
    and CPU tensors run on the CPU accelerator, CUDA tensors on CUDA (each through the shared
    Context of that accelerator, made on first use), so the same call works on a machine whose
    best accelerator is a GPU. Arguments with no device (numbers only) go to the best accelerator
    here. An explicit target pins the op to that target's Context, as Context.op does."""

    __slots__ = ("_make", "_ops", "_last", "_best")

    def __init__(self, make):
        self._make = make  # accelerator name -> Op
        self._ops = {}
        self._last = None
        # Read once: a call looks in _ops only, with no lock (the shared Context of the best
        # accelerator serves that accelerator's arguments too).
        self._best = context().accelerator

    @staticmethod
    def _device_of(args):
        for a in args:
            device = getattr(a, "device", None)
            kind = getattr(device, "type", None)
            if kind in ("cpu", "cuda"):
                return kind
            if hasattr(a, "__array_interface__"):
                return "cpu"
        return ""

    def _op(self, accelerator):
        if accelerator == self._best:
            accelerator = ""
        found = self._ops.get(accelerator)
        if found is None:
            found = self._ops[accelerator] = self._make(accelerator)
        self._last = found
        return found

    def _default(self):
        return self._last or self._op("")

    name = property(lambda self: self._default().name)
    target = property(lambda self: self._default().target)
    entries = property(lambda self: self._default().entries)
    cache_source = property(lambda self: self._default().cache_source)

    def params(self, entry=""):
        return self._default().params(entry)

    def build(self):
        self._default().build()
        return self

    def launch_shape(self, entry="", block=None, device="", **sizes):
        """Op.launch_shape on `device` ("cpu", "cuda"; by default where the op last ran, else the
        best accelerator here)."""
        return (self._op(device) if device else self._default()).launch_shape(entry, block, **sizes)

    def __call__(self, *args, **kwargs):
        return self._op(self._device_of(args))(*args, **kwargs)

    launch = __call__

    def __repr__(self):
        return "<kiln.Op %s for %s>" % (self.name, self.target)


def op(name, target=""):
    """kiln.op("adamw"): the op, ready to call on tensors and arrays; it runs on the accelerator
    they live on (CPU tensors and arrays on the CPU, CUDA tensors on CUDA). With a target
    ("cuda:sm_90"), the op of the shared Context for that target."""
    if target:
        return context().op(name, target)
    by_device = _OpByDevice(lambda accelerator: context(accelerator).op(name))
    by_device._default()  # an op that does not exist is an error now, not at its first call
    return by_device


def op_from_spec(toml, base_dir=".", target=""):
    if target:
        return context().op_from_spec(toml, base_dir, target)
    by_device = _OpByDevice(lambda accelerator: context(accelerator).op_from_spec(toml, base_dir))
    by_device._default()  # a spec that does not parse is an error now
    return by_device


def accelerator():
    """The name of the accelerator kiln's ops run on here ("cpu", "cuda", ...)."""
    return context().accelerator
