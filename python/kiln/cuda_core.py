"""cuda.core's program cache over kiln's store and tiers.

cuda.core's ``Program.compile(target, cache=...)`` takes a ``ProgramCacheResource``: it derives
the key itself (``make_program_cache_key``: NVRTC's version, the code, the options, the target)
and asks the cache before it compiles. ``ProgramCache`` is that resource over kiln's store, so
a program compiled on one node is kept like every kiln artifact (checked, signed, under the cap,
in ``kiln cache list`` as kind ``cuda-core-program``) and published to the cluster's tiers, and a
lookup that misses claims the key: nodes that start together compile each program once.

    from cuda.core import Program, ProgramOptions
    from kiln.cuda_core import ProgramCache

    with ProgramCache() as cache:
        cubin = Program(source, "c++", ProgramOptions(arch="sm_90")).compile("cubin", cache=cache)

What the key does not see is cuda.core's to say: options that read files (``include_path``,
``pre_include``, a PCH) are refused with ``cache=`` unless the caller passes their fingerprint
(``make_program_cache_key(..., extra_digest=)``) and uses the cache as a mapping. Programs that
call NVRTC without cuda.core's hook (CuPy, numba-cuda, DeepGEMM) need the preloaded library
instead (docs/LLM-SERVING.md).

An entry cannot be removed by key or the whole cache cleared from here: the store is shared by
every kind and every process, and goes by its cap (``kiln cache gc``, ``kiln cache clear``).
"""
import hashlib
import threading
import warnings

from cuda.core.utils import ProgramCacheResource
# How cuda.core's own caches turn what they are handed (bytes, an ObjectCode in memory or by
# path) into bytes: the same here, so a value means what it means to them.
from cuda.core.utils._program_cache._abc import _extract_bytes

KIND = "cuda-core-program"
_ENTRY = "program"  # the one file of each stored group: the bytes cuda.core handed over


def _key_text(key):
    """A key as kiln keeps it: the SHA-256 of its bytes (cuda.core's own keys are digests; a
    caller's may be any length)."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError("cache keys must be bytes or str, got %s" % type(key).__name__)
    return "sha256:" + hashlib.sha256(bytes(key)).hexdigest()


def _cuda_core_version():
    try:
        from cuda.core import __version__

        return __version__
    except ImportError:
        return "?"


class ProgramCache(ProgramCacheResource):
    """cuda.core's ProgramCacheResource over kiln's store (see the module's docstring).

    single_flight: a lookup that misses claims the key until the compile's result is stored, so
    processes and nodes (through the Redis tier's lease) asking for it meanwhile wait for that
    one compile instead of compiling it again. A claim whose compile fails is let go at close().
    """

    def __init__(self, single_flight=True):
        self._single_flight = single_flight
        self._claims = {}
        self._lock = threading.Lock()
        self._warned = set()
        self.stats = {"hits": 0, "hits_remote": 0, "misses": 0, "stored": 0, "errors": 0}

    def _warn_once(self, topic, message):
        if topic not in self._warned:
            self._warned.add(topic)
            warnings.warn("kiln.cuda_core: " + message, RuntimeWarning, stacklevel=3)

    def __getitem__(self, key):
        from . import KilnError, context

        text = _key_text(key)
        try:
            ctx = context("none")
            with self._lock:
                claimed = text in self._claims
            # A key this cache claimed already (asked again before its result was stored): a
            # second claim would wait on the first.
            if self._single_flight and not claimed:
                group, claim = ctx.find_or_claim_files(KIND, text)
                if claim is not None and claim.held:
                    with self._lock:
                        self._claims[text] = claim
            else:
                group = ctx.find_files(KIND, text)
        except KilnError as e:
            self.stats["errors"] += 1
            self._warn_once("get", "a lookup failed, compiling instead: %s" % e)
            raise KeyError(key) from None
        if group is None:
            self.stats["misses"] += 1
            raise KeyError(key)
        try:
            with open(dict(group["files"])[_ENTRY], "rb") as f:
                data = f.read()
        except (OSError, KeyError) as e:
            self.stats["errors"] += 1
            self._warn_once("read", "a stored program could not be read, compiling instead: %s" % e)
            raise KeyError(key) from None
        self.stats["hits_remote" if group.get("cache_source") == "remote" else "hits"] += 1
        return data

    def __setitem__(self, key, value):
        from . import KilnError, context

        text = _key_text(key)
        data = _extract_bytes(value)
        with self._lock:
            claim = self._claims.pop(text, None)
        try:
            context("none").store_files(KIND, text, [(_ENTRY, data)], label="cuda.core program",
                                        toolchain="cuda.core " + _cuda_core_version(), claim=claim, compiled=True)
        except KilnError as e:
            self.stats["errors"] += 1
            self._warn_once("put", "a program could not be stored (this run goes on; the next compiles it again): %s" % e)
            if claim is not None and claim.held:
                claim.release()
            return
        self.stats["stored"] += 1

    def __delitem__(self, key):
        self[key]  # KeyError when absent, as the interface asks
        raise NotImplementedError("kiln's store is shared by every process and node and keeps what it holds until its cap "
                                  "or `kiln cache gc` takes it: an entry cannot be removed by key")

    def __len__(self):
        from . import context

        return len(context("none").list_files(KIND))

    def clear(self):
        raise NotImplementedError("kiln's store is shared by every kind of artifact: `kiln cache clear` empties it whole")

    def close(self):
        """Lets go of the keys this cache claimed whose compiles never stored a result."""
        with self._lock:
            claims, self._claims = self._claims, {}
        for claim in claims.values():
            if claim.held:
                claim.release()
