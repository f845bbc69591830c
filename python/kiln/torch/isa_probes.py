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

Probes make no precompiled header (is_probe): each is built once per machine and flag set. And on
a node where nothing is stored, the probes of the candidate ISAs are built side by side rather
than one after the other as Inductor asks them (valid_vec_isa_list): Clang parses ATen's vector
headers for each (0.7-2 s a probe, 7.9 s for six in a row here), and the compiles release the GIL.
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
            context("none").store_files(KIND, _verdict_key(key), [("ok", b"loaded\n")], label=str(self), keep_first=True,
                                             compiled=False)
        except KilnError as e:
            _log.debug("the probe's verdict was not stored: %s", e)
    return loaded


_original_list = None


def _candidates(cpu_vec_isa):
    """The ISAs Inductor's valid_vec_isa_list tries on this x86 machine: those whose flags the CPU
    reports (torch 2.15's own filter, before it builds each one's probe)."""
    import platform
    import sys

    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return []
    flags = cpu_vec_isa.x86_isa_checker()
    return [isa for isa in cpu_vec_isa.supported_vec_isa_list if all(f in flags for f in str(isa).split())]


@functools.cache
def _valid_vec_isa_list():
    """cpu_vec_isa.valid_vec_isa_list, its probes built side by side first (see the module's doc)."""
    from concurrent.futures import ThreadPoolExecutor

    from torch._inductor import cpu_vec_isa

    try:
        candidates = _candidates(cpu_vec_isa)
    except Exception as e:  # a torch whose probes are laid out otherwise: Inductor's own order
        _log.debug("the ISA probes are built in Inductor's order: %s", e)
        candidates = []
    if len(candidates) > 1:
        # bool(isa) builds (and loads) its probes and is cached per ISA; the list below takes the
        # answers as they are.
        with ThreadPoolExecutor(max_workers=min(len(candidates), os.cpu_count() or 2)) as pool:
            list(pool.map(bool, candidates))
    return _original_list()


def install():
    global _original, _original_list
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return
    with _lock:
        if _original is not None or not hasattr(cpu_vec_isa.VecISA, "_probe_load"):
            return
        _original = cpu_vec_isa.VecISA._probe_load
        cpu_vec_isa.VecISA._probe_load = _probe_load
        if hasattr(cpu_vec_isa, "valid_vec_isa_list") and hasattr(cpu_vec_isa, "x86_isa_checker"):
            _original_list = cpu_vec_isa.valid_vec_isa_list
            cpu_vec_isa.valid_vec_isa_list = _valid_vec_isa_list


def uninstall():
    global _original, _original_list
    from torch._inductor import cpu_vec_isa

    with _lock:
        if _original is None:
            return
        cpu_vec_isa.VecISA._probe_load, _original = _original, None
        if _original_list is not None:
            cpu_vec_isa.valid_vec_isa_list, _original_list = _original_list, None


def stats():
    return dict(_stats)
