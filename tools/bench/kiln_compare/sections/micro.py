"""what a hit costs in a resident process, the index at 1,000,000 entries, gc,
and what zstd saves on the bundled ops' artifacts
"""
import os
import subprocess

from ..harness import add, bundled_specs, ceiling, gbench, KILN, ROOT, rows, run


FLOORED = True  # compare --check: this section must measure its rows with a ceiling

# The most a resident hit's steps may take before `compare --check` fails: 3 to 4.5 times the
# slowest of the runs they were set from, and above the figures an AMD EPYC VM gave on 2026-11-23
# (35.5, -, 99.2 and 11.4 us): a machine of another kind or a noisy minute does not trip them, a
# step that starts to do what it did not (a second read of the blob, a stat per header, an index
# scan) does.
CEILING_SOURCE = ("6 runs of tools/bench/compare --ci, Intel Xeon VM (2 cores, quiet), 2026-12-04: disk hit 21.6-27.0 us, "
                  "and load 58.7-79.5 us, 100 KiB artifact 61.7-83.0 us, index lookup 5.6-6.8 us; "
                  "docs/history/2026-12-04-9945305-compare-ci-floors.md")
CEILINGS_MS = {"BM_DiskHit": 0.1, "BM_DiskHitAndLoad": 0.25, "BM_IndexLookup/1000000": 0.03, "BM_DiskHit100KiB": 0.35}


def section(a, work):
    ci = getattr(a, "ci", False)  # --ci: only the rows with a ceiling
    r = gbench("kiln_bench", "^BM_(DiskHit|DiskHitAndLoad)(/|$)" if ci else "^BM_(MemoryHit|DiskHit|DiskHitAndLoad|WarmCompile)(/|$)", a.reps)
    what = {"BM_MemoryHit": "hit from the in-process map (Ops::get of a loaded op)",
            "BM_DiskHit": "hit from disk in a resident process (key, manifest, header stats, blob, hashes)",
            "BM_DiskHitAndLoad": "the same plus loading the module (dlopen from a memfd)",
            "BM_WarmCompile": "vector_add compiled and linked in a resident process"}
    for name, e in sorted(r.items()):
        row = {"section": "micro", "what": what.get(name, name), "kiln": {"median_ms": e["median_ms"], "sd_ms": e.get("stddev_ms"),
               "n": e["n"], "how": "kiln_bench " + name}}
        rows.append(ceiling(row, CEILINGS_MS[name], CEILING_SOURCE) if name in CEILINGS_MS else row)
    c = gbench("kiln_cache_bench", "IndexLookup|DiskHit", 1 if a.quick else 3)
    if not ci:
        c.update(gbench("kiln_cache_bench", "Gc", 1))  # one eviction run: it pauses the clock to set up
    for name, e in sorted(c.items()):
        label = {"BM_IndexLookup/1000000": "a record in an index of 1,000,000 artifacts",
                 "BM_DiskHit100KiB": "a 100 KiB artifact read, decompressed and verified",
                 "BM_Gc/100000": "gc evicting 50,000 of 100,000 entries (rows and files)"}.get(name, name)
        k = {"median_ms": e["median_ms"], "sd_ms": e.get("stddev_ms"), "n": e["n"], "how": "kiln_cache_bench " + name}
        cn = e["counters"]
        note = f"p50 {cn['p50_us']:.1f} us, p99 {cn['p99_us']:.1f} us" if "p99_us" in cn else None
        row = {"section": "micro", "what": label, "kiln": k, "note": note}
        rows.append(ceiling(row, CEILINGS_MS[name], CEILING_SOURCE) if name in CEILINGS_MS else row)
    # A benchmark with a ceiling that gave no figure (it failed, was skipped or renamed) is a row
    # that says so, which --check fails on.
    for name in sorted(set(CEILINGS_MS) - set(r) - set(c)):
        row = add("micro", name, None, "", missing=f"{name} gave no figure (failed, skipped or renamed; see the log above)")
        ceiling(row, CEILINGS_MS[name], CEILING_SOURCE)
    if ci:
        return
    # What zstd saves on the bundled ops' artifacts, at the level the cache uses.
    raw = packed = 0
    for op in bundled_specs():
        out = os.path.join(work, op + ".so")
        run([KILN, "--cache-dir", os.path.join(work, "z"), "build", os.path.join(ROOT, "specs", op + ".toml"), "-o", out])
        raw += os.path.getsize(out)
        packed += len(subprocess.run(["zstd", "--fast=1", "-c", out], stdout=subprocess.PIPE, check=True).stdout)
    rows.append({"section": "micro", "what": f"zstd --fast=1 on the {len(bundled_specs())} bundled ops' cpu artifacts",
                 "note": f"{raw:,} -> {packed:,} bytes ({raw / packed:.2f}x)"})
