"""Inductor's vector-ISA probes, as kiln builds and checks them.

Before its first CPU graph, each process of Inductor asks which vector ISAs work here: for each
candidate (AVX-512, AVX2, AVX-512 with BF16 or VNNI, AMX, ...) it builds a tiny probe library with
that ISA's flags and loads it in a child Python (`cpu_vec_isa.VecISA.check_build`), remembering a
success in a `.load_ok` file beside the library, under TORCHINDUCTOR_CACHE_DIR. A new node has no
such file: its six child Pythons cost 1.4 s of a 2-5 s first call here (cProfile, 2026-11-29).

kiln builds the probes like any kernel (kiln.torch.inductor), keyed by their source, flags, torch
and the CPU they are for, so a probe kiln hands back was built for a CPU with the same vendor,
model and feature flags. The verdict is kept the same way: when a probe loads, a `isa-probe-ok`
artifact is stored under the probe's artifact key, and a node that gets the same probe (the same
bytes, for the same CPU and torch) takes the verdict instead of starting a child to load it. A
probe that fails to load keeps no verdict: it is tried again, as Inductor does.

Probes make no precompiled header (is_probe): each is built once per machine and flag set.
"""
import functools
import logging
import os
import threading

_log = logging.getLogger("kiln.inductor")
KIND = "isa-probe-ok"
_lock = threading.Lock()
_keys = {}  # the probe library's path -> its artifact key (hex)
_original = None
_stats = {"verdicts_reused": 0, "probes_loaded": 0}


@functools.lru_cache(maxsize=None)
def _probe_sources():
    """The sources of Inductor's probes (the `*_code` texts of cpu_vec_isa's VecISA classes:
    VecISA._avx_code, VecAVX512's BF16 and VNNI ones, VecAMX's), stripped."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return frozenset()
    texts = set()
    for cls in vars(cpu_vec_isa).values():
        if isinstance(cls, type) and issubclass(cls, cpu_vec_isa.VecISA):
            texts.update(v.strip() for k, v in vars(cls).items() if k.endswith("_code") and isinstance(v, str))
    return frozenset(texts)


def is_probe(source):
    """Whether `source` is one of Inductor's vector-ISA probes."""
    probes = _probe_sources()
    try:
        if not probes or os.path.getsize(source) > max(len(p) for p in probes) + 64:
            return False
        with open(source, encoding="utf-8", errors="replace") as f:
            return f.read().strip() in probes
    except OSError:
        return False


def built(output, key):
    """kiln built (or found) the probe library `output` as artifact `key`."""
    with _lock:
        _keys[os.path.realpath(output)] = key


def _verdict_key(key):
    return "kiln-isa-probe 1 | " + key


def _probe_load(self, output_path):
    """VecISA._probe_load: the stored verdict for these bytes, else Inductor's child Python (and
    its success stored)."""
    with _lock:
        key = _keys.get(os.path.realpath(output_path))
    from .. import KilnError, context

    if key:
        try:
            if context("none").find_files(KIND, _verdict_key(key)) is not None:
                _stats["verdicts_reused"] += 1
                return True
        except KilnError as e:
            _log.debug("no stored verdict for the probe %s: %s", output_path, e)
    loaded = _original(self, output_path)
    _stats["probes_loaded"] += 1
    if loaded and key:
        try:
            context("none").store_files(KIND, _verdict_key(key), [("ok", b"loaded\n")], label=str(self), keep_first=True)
        except KilnError as e:
            _log.debug("the probe's verdict was not stored: %s", e)
    return loaded


def install():
    global _original
    try:
        from torch._inductor.cpu_vec_isa import VecISA
    except ImportError:
        return
    with _lock:
        if _original is not None or not hasattr(VecISA, "_probe_load"):
            return
        _original = VecISA._probe_load
        VecISA._probe_load = _probe_load


def uninstall():
    global _original
    from torch._inductor.cpu_vec_isa import VecISA

    with _lock:
        if _original is None:
            return
        VecISA._probe_load, _original = _original, None


def stats():
    return dict(_stats)
