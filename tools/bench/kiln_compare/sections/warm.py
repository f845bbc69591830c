"""warming every bundled op: kiln warm -j2 next to ninja -j2 with clang++-22; for
CUDA (three architectures) next to nvcc, two at a time; for sm_90, kiln warm -j1
(header artifacts stored, or an empty cache) next to one nvcc per op in turn
"""
import os

from ..harness import (add, bundled_specs, compiler_command, cpu_level, Floor, goal, hyperfine, interleaved, KILN, NVCC,
                       nvcc_sources, paired_ratio, ROOT, run, sibling_specs, spec_facts)

FLOORED = True  # compare --check: this section must measure its floored row

# The CUDA warm of the bundled ops for sm_90 with the header artifacts stored, next to one nvcc
# per op, checked on nvcc's time over kiln's in the same round. The goal is 8x, and it is missed:
# kiln's time goes to NVVM's and LLVM's optimisers and to ptxas, not to headers
# (docs/history/2026-12-04-9945305-compare-ci-floors.md), and ptxas alone, the same work on both
# sides, took 0.81 s of the 1.0 s that 8x of nvcc's 7.96 s leaves kiln
# (docs/history/2026-12-04-0699a1f-cuda-warm-ceiling.md). The floor holds what is there: a fall of
# a quarter from the lowest run trips it.
WARM_SM90_FLOOR = Floor(min_ratio=3.0, source=(
    "6 runs of tools/bench/compare --ci, Intel Xeon VM (2 cores, quiet), 2026-12-04: nvcc over kiln 3.5-4.4x "
    "(medians), 3.9-4.2x in the same round (the last 3); docs/history/2026-12-04-9945305-compare-ci-floors.md"))


def section(a, work):
    ops = [op for op in bundled_specs()]
    if not getattr(a, "ci", False):  # --ci: only the floored row, the sm_90 warm with header artifacts stored
        cpu_warm(a, work, ops)
    if not NVCC:
        add("warm", "warming for CUDA", None, "", missing="nvcc is not installed here")
        return
    cuda_ops = [op for op in ops if spec_facts(op)["cuda_sources"]]
    if not getattr(a, "ci", False):
        cuda_three_archs(a, work, cuda_ops)
    cuda_sm90(a, work, cuda_ops)


def cpu_warm(a, work, ops):
    level = cpu_level()
    ninja_dir = os.path.join(work, "ninja")
    os.makedirs(ninja_dir)
    lines = ["rule cxx", "  command = $cmd", ""]
    for op in ops:
        cmd = compiler_command("clang++-22", op, os.path.join(ninja_dir, "out", op + ".so"), level)
        lines += [f"build out/{op}.so: cxx", f"  cmd = {' '.join(cmd)}", ""]
    open(os.path.join(ninja_dir, "build.ninja"), "w").write("\n".join(lines))
    runs = 3 if a.quick else 10
    t = hyperfine([("kiln warm -j2", f"{KILN} --cache-dir {work}/warm warm -j2"),
                   ("ninja -j2", f"ninja -C {ninja_dir} -j2")], runs, 1,
                  prepare=f"rm -rf {work}/warm {ninja_dir}/out {ninja_dir}/.ninja_log {ninja_dir}/.ninja_deps")
    add("warm", f"warming the {len(ops)} bundled ops for the CPU, cold", t["kiln warm -j2"], f"{KILN} --cache-dir DIR warm -j2",
        t["ninja -j2"], f"ninja -j2 over build.ninja: one clang++-22 -O3 -march={level} -shared per op, same flags")


def cuda_three_archs(a, work, cuda_ops):
    """Every op for three architectures in one kiln process, next to nvcc once per op and
    architecture, two at a time (what a build system would run)."""
    ninja_dir = os.path.join(work, "ninja")
    lines = ["rule nvcc", "  command = $cmd", ""]
    for op in cuda_ops:
        srcs = " ".join(nvcc_sources(op, work))
        rdc = " -rdc=true" if len(spec_facts(op)["cuda_sources"]) > 1 else ""
        for sm in (80, 90, 100):
            lines += [f"build out/{op}.{sm}.cubin: nvcc",
                      f"  cmd = {NVCC} -cubin -arch=sm_{sm}{rdc} -I{ROOT}/specs/include {srcs} -o {ninja_dir}/out/{op}.{sm}.cubin", ""]
    open(os.path.join(ninja_dir, "cuda.ninja"), "w").write("\n".join(lines))
    runs = 2 if a.quick else 5
    t = hyperfine([("kiln warm cuda", f"{KILN} --cache-dir {work}/warm-cuda warm -j2 --target cuda:sm_80,sm_90,sm_100"),
                   ("nvcc", f"ninja -f {ninja_dir}/cuda.ninja -C {ninja_dir} -j2")], runs, 0,
                  prepare=f"rm -rf {work}/warm-cuda {ninja_dir}/out {ninja_dir}/.ninja_log {ninja_dir}/.ninja_deps")
    add("warm", f"{len(cuda_ops)} CUDA ops x sm_80,sm_90,sm_100 (a cubin each and PTX; Clang for CUB and cooperative groups, "
        f"NVRTC for the others), empty cache", t["kiln warm cuda"],
        f"{KILN} --cache-dir DIR warm -j2 --target cuda:sm_80,sm_90,sm_100", t["nvcc"],
        f"ninja -j2: {3 * len(cuda_ops)} x nvcc -cubin -arch=sm_XX (one per op and architecture)")


def cuda_sm90(a, work, cuda_ops):
    """Every op for sm_90 in one process, one op at a time, next to one nvcc per op one after
    another: with the header artifacts stored (warming a sibling of each op leaves them), and
    with an empty cache; and through NVRTC alone."""
    ninja_dir = os.path.join(work, "ninja")
    os.makedirs(ninja_dir, exist_ok=True)
    lines = ["rule nvcc", "  command = $cmd", ""]
    for op in cuda_ops:
        srcs = " ".join(nvcc_sources(op, work))
        rdc = " -rdc=true" if len(spec_facts(op)["cuda_sources"]) > 1 else ""
        lines += [f"build out/{op}.90.cubin: nvcc",
                  f"  cmd = {NVCC} -cubin -arch=sm_90{rdc} -I{ROOT}/specs/include {srcs} -o {ninja_dir}/out/{op}.90.cubin", ""]
    open(os.path.join(ninja_dir, "cuda90.ninja"), "w").write("\n".join(lines))
    base = os.path.join(work, "headers-stored")
    run([KILN, "--cache-dir", base, "warm", "-j1", "-q", "--target", "cuda:sm_90", "--spec-dir", sibling_specs(os.path.join(work, "siblings"))])
    nvcc_how = f"ninja -j1: {len(cuda_ops)} x nvcc -cubin -arch=sm_90, one after another"
    runs = 3 if a.quick else 8
    kiln_cmd = f"{KILN} --cache-dir {work}/w90 warm -j1 -q --target cuda:sm_90"
    # In rounds, kiln then nvcc or nvcc then kiln, each from a fresh copy of the stored header
    # artifacts and an empty ninja folder: the ratio the floor holds is the two in the same round.
    samples = {}
    t = interleaved([("kiln", kiln_cmd), ("nvcc", f"ninja -f {ninja_dir}/cuda90.ninja -C {ninja_dir} -j1")], runs, warmup=1,
                    prepare=f"rm -rf {work}/w90 {ninja_dir}/out {ninja_dir}/.ninja_log {ninja_dir}/.ninja_deps && cp -r {base} {work}/w90",
                    samples_out=samples)
    row = add("warm", f"{len(cuda_ops)} CUDA ops for sm_90, one process, one op at a time, header artifacts stored", t["kiln"],
              f"{KILN} --cache-dir DIR warm -j1 --target cuda:sm_90 (DIR holding the PCHs of the ops' includes only)", t["nvcc"], nvcc_how)
    row["paired_ratio"] = paired_ratio(samples["kiln"], samples["nvcc"])
    row["note"] = f"nvcc's time over kiln's in the same round: median {1 / row['paired_ratio']['median']:.2f}x, in {runs} rounds"
    goal(row, ">= 8x nvcc", row["ratio"] >= 8, floor=WARM_SM90_FLOOR)
    if getattr(a, "ci", False):
        return
    cold = hyperfine([("kiln", kiln_cmd), ("kiln nvrtc", f"env KILN_CUDA_TOOLCHAIN=nvrtc {kiln_cmd}")], max(3, runs // 2), 1,
                     prepare=f"rm -rf {work}/w90")
    add("warm", "the same with an empty cache (the header artifacts made too)", cold["kiln"],
        f"{KILN} --cache-dir DIR warm -j1 --target cuda:sm_90", t["nvcc"], nvcc_how)
    add("warm", "the same through NVRTC alone (what kiln did before), empty cache", cold["kiln nvrtc"],
        f"env KILN_CUDA_TOOLCHAIN=nvrtc {KILN} --cache-dir DIR warm -j1 --target cuda:sm_90", t["nvcc"], nvcc_how)
