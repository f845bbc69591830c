"""what a hit costs in a resident process, the index at 1,000,000 entries, gc,
and what zstd saves on the bundled ops' artifacts
"""
import os
import subprocess

from ..harness import bundled_specs, gbench, KILN, ROOT, rows, run


def section(a, work):
    r = gbench("kiln_bench", "^BM_(MemoryHit|DiskHit|DiskHitAndLoad|WarmCompile)(/|$)", a.reps)
    what = {"BM_MemoryHit": "hit from the in-process map (Ops::get of a loaded op)",
            "BM_DiskHit": "hit from disk in a resident process (key, manifest, header stats, blob, hashes)",
            "BM_DiskHitAndLoad": "the same plus loading the module (dlopen from a memfd)",
            "BM_WarmCompile": "vector_add compiled and linked in a resident process"}
    for name, e in sorted(r.items()):
        rows.append({"section": "micro", "what": what.get(name, name), "kiln": {"median_ms": e["median_ms"], "sd_ms": e.get("stddev_ms"),
                     "n": e["n"], "how": "kiln_bench " + name}})
    c = gbench("kiln_cache_bench", "IndexLookup|DiskHit", 1 if a.quick else 3)
    c.update(gbench("kiln_cache_bench", "Gc", 1))  # one eviction run: it pauses the clock to set up
    for name, e in sorted(c.items()):
        label = {"BM_IndexLookup/1000000": "a record in an index of 1,000,000 artifacts",
                 "BM_DiskHit100KiB": "a 100 KiB artifact read, decompressed and verified",
                 "BM_Gc/100000": "gc evicting 50,000 of 100,000 entries (rows and files)"}.get(name, name)
        k = {"median_ms": e["median_ms"], "sd_ms": e.get("stddev_ms"), "n": e["n"], "how": "kiln_cache_bench " + name}
        cn = e["counters"]
        note = f"p50 {cn['p50_us']:.1f} us, p99 {cn['p99_us']:.1f} us" if "p99_us" in cn else None
        rows.append({"section": "micro", "what": label, "kiln": k, "note": note})
    # What zstd saves on the bundled ops' artifacts, at the level the cache uses.
    raw = packed = 0
    for op in bundled_specs():
        out = os.path.join(work, op + ".so")
        run([KILN, "--cache-dir", os.path.join(work, "z"), "build", os.path.join(ROOT, "specs", op + ".toml"), "-o", out])
        raw += os.path.getsize(out)
        packed += len(subprocess.run(["zstd", "--fast=1", "-c", out], stdout=subprocess.PIPE, check=True).stdout)
    rows.append({"section": "micro", "what": f"zstd --fast=1 on the {len(bundled_specs())} bundled ops' cpu artifacts",
                 "note": f"{raw:,} -> {packed:,} bytes ({raw / packed:.2f}x)"})
