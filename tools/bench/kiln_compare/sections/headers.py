"""a kernel that includes <cmath>, <vector> and <immintrin.h>: kiln once its
precompiled header is stored, next to a clang++-22 subprocess
"""
import os
import shutil

from ..harness import add, compiler_command, cpu_level, gbench, goal, hyperfine, KILN, ROOT, run


def section(a, work):
    level = cpu_level()
    bench_specs = os.path.join(ROOT, "tools/bench/specs")
    spec = os.path.join(bench_specs, "system_headers.toml")
    resident = gbench("kiln_bench", "BM_CpuCompile/system_headers/", a.reps)
    # A cache that holds the headers' PCH (made by compiling a sibling op that starts with the
    # same includes), copied fresh before each run: each `kiln build` is a miss that finds it.
    base = os.path.join(work, "pch-base")
    sibling_dir = os.path.join(work, "sibling")
    shutil.copytree(bench_specs, sibling_dir)
    src = open(os.path.join(sibling_dir, "kernels/system_headers.cpp")).read().replace("std::tanh", "std::sin")
    open(os.path.join(sibling_dir, "kernels/system_headers.cpp"), "w").write(src)
    run([KILN, "--cache-dir", base, "build", os.path.join(sibling_dir, "system_headers.toml")])
    peer = compiler_command("clang++-22", "system_headers", os.path.join(work, "h.so"), level, bench_specs)
    runs = 5 if a.quick else 20
    t = hyperfine([("kiln, PCH stored", f"{KILN} --cache-dir {work}/pch build {spec}"),
                   ("kiln, no PCH yet", f"env KILN_PCH=0 {KILN} --cache-dir {work}/pch build {spec}"),
                   ("clang++-22", " ".join(peer))], runs, 2, prepare=f"sh -c 'rm -rf {work}/pch && cp -r {base} {work}/pch'")
    with_pch = resident.get("BM_CpuCompile/system_headers/pch")
    plain = resident.get("BM_CpuCompile/system_headers/plain")
    if with_pch:
        add("headers", "<cmath>+<vector>+<immintrin.h> kernel, PCH stored: resident kiln compile",
            {"median_ms": with_pch["median_ms"], "sd_ms": with_pch.get("stddev_ms"), "n": with_pch["n"]},
            "kiln_bench BM_CpuCompile/system_headers/pch", t["clang++-22"], " ".join(peer))
    if plain:
        add("headers", "the same with no PCH: resident kiln compile",
            {"median_ms": plain["median_ms"], "sd_ms": plain.get("stddev_ms"), "n": plain["n"]},
            "kiln_bench BM_CpuCompile/system_headers/plain", t["clang++-22"], " ".join(peer))
    whole = add("headers", "PCH stored: whole `kiln build` (loads LLVM, reads the PCH, compiles, stores)", t["kiln, PCH stored"],
                f"{KILN} --cache-dir DIR build {spec}", t["clang++-22"], " ".join(peer))
    # Issue 19's goal is for the whole process, the peer's median over kiln's in this run.
    goal(whole, ">= 5x clang++-22", whole["ratio"] >= 5)
    add("headers", "no PCH: whole `kiln build`", t["kiln, no PCH yet"], f"env KILN_PCH=0 {KILN} --cache-dir DIR build {spec}",
        t["clang++-22"], " ".join(peer))
