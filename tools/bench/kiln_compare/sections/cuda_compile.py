"""each bundled CUDA op: kiln (NVRTC and Clang) in a resident process, next to
nvcc to PTX and to an sm_90 cubin; the ops kiln sends through Clang (CUB,
cooperative groups) as whole `kiln build` processes, their header artifact stored
or not, next to nvcc -cubin
"""
import os
import statistics

from ..harness import add, bundled_specs, cuda_route, gbench, goal, hyperfine, KILN, NVCC, nvcc_sources, ROOT, rows, run, sibling_specs, spec_facts


def section(a, work):
    if not NVCC:
        add("cuda-compile", "bundled CUDA ops", None, "", missing="nvcc is not installed here (the CUDA toolkit is absent)")
        return
    resident = gbench("kiln_bench", "BM_CudaCompile", a.reps)
    runs = 3 if a.quick else 10
    ratios = {}
    for op in bundled_specs():
        f = spec_facts(op)
        if not f["cuda_sources"]:
            continue
        srcs = nvcc_sources(op, work)
        inc = "-I" + os.path.join(ROOT, "specs/include")
        rdc = " -rdc=true" if len(srcs) > 1 else ""
        ptx_cmd = f"{NVCC} -ptx -arch=compute_90{rdc} {inc} {' '.join(srcs)} -o {work}/{op}.ptx"
        cubin_cmd = f"{NVCC} -cubin -arch=sm_90{rdc} {inc} {' '.join(srcs)} -o {work}/{op}.cubin"
        t = hyperfine([("ptx", ptx_cmd), ("cubin", cubin_cmd)], runs, 1)
        for path in ("nvrtc", "clang", "clang-pch"):
            for output in ("ptx", "cubin"):
                r = resident.get(f"BM_CudaCompile/{op}/{path}/{output}")
                if not r:
                    continue
                how = {"nvrtc": "NVRTC", "clang": "Clang", "clang-pch": "Clang, toolkit headers precompiled"}[path]
                row = add("cuda-compile", f"{op}: to {output} through {how}, resident kiln",
                          {"median_ms": r["median_ms"], "sd_ms": r.get("stddev_ms"), "n": r["n"]},
                          f"kiln_bench BM_CudaCompile/{op}/{path}/{output}", t[output], ptx_cmd if output == "ptx" else cubin_cmd)
                ratios.setdefault((path, output), []).append(row["ratio"])
    # Clang over every op: the stored PCH where the op has one (as a kiln process compiles it).
    best_clang = {}
    for row in [r for r in rows if r["section"] == "cuda-compile" and "Clang" in r["what"]]:
        op, rest = row["what"].split(": to ", 1)
        output = rest.split(" ")[0]
        best_clang.setdefault((op, output), []).append(row["ratio"])
    for output in ("ptx", "cubin"):
        xs = [max(v) for (op, o), v in best_clang.items() if o == output]
        if xs:
            ratios[("clang (with its PCH where it has one)", output)] = xs
    # kiln's default route: Clang with the stored header PCH for CUB and cooperative groups,
    # NVRTC for the others.
    for output in ("ptx", "cubin"):
        xs = []
        for op in bundled_specs():
            if not spec_facts(op)["cuda_sources"]:
                continue
            path = "Clang, toolkit headers precompiled" if cuda_route(op) == "clang" else "NVRTC"
            xs += [r["ratio"] for r in rows if r["section"] == "cuda-compile" and r["what"] == f"{op}: to {output} through {path}, resident kiln"]
        if xs:
            ratios[("kiln's default route (Clang with its PCH for CUB and cooperative groups, else NVRTC)", output)] = xs
    ratios = {k: v for k, v in ratios.items() if k[0] != "clang-pch"}
    for (path, output), xs in sorted(ratios.items()):
        rows.append({"section": "cuda-compile", "what": f"median over the {len(xs)} ops: {path} to {output}", "summary_ratio": statistics.median(xs),
                     "note": "goal (NVRTC): 10x" if path == "nvrtc" else None})
    cuda_compile_whole_process(a, work)


def cuda_compile_whole_process(a, work):
    """The ops kiln compiles through Clang by default (CUB, cooperative groups), each a whole
    `kiln build --target cuda:sm_90` next to `nvcc -cubin -arch=sm_90`: with the header artifact
    (the PCH of its includes) in the cache and the op's own artifact not, as after any earlier
    op with the same includes; with an empty cache (the PCH made too); and through NVRTC."""
    base = os.path.join(work, "headers-stored")
    siblings = sibling_specs(os.path.join(work, "siblings"))
    runs = 3 if a.quick else 10
    for op in [o for o in bundled_specs() if spec_facts(o)["cuda_sources"] and cuda_route(o) == "clang"]:
        run([KILN, "--cache-dir", base, "build", os.path.join(siblings, op + ".toml"), "--target", "cuda:sm_90"])
        srcs = " ".join(nvcc_sources(op, work))
        nvcc_cmd = f"{NVCC} -cubin -arch=sm_90 -I{ROOT}/specs/include {srcs} -o {work}/{op}.cubin"
        kiln_cmd = f"{KILN} --cache-dir {work}/c build {ROOT}/specs/{op}.toml --target cuda:sm_90"
        t = hyperfine([("kiln", kiln_cmd), ("nvcc", nvcc_cmd)], runs, 2, prepare=f"sh -c 'rm -rf {work}/c && cp -r {base} {work}/c'")
        row = add("cuda-compile", f"{op}: cold `kiln build` to an sm_90 cubin + PTX, its header artifact stored, whole process",
                  t["kiln"], kiln_cmd.replace(f"{work}/c", "DIR") + " (DIR holding the PCH of its includes only)", t["nvcc"], nvcc_cmd)
        goal(row, ">= 5x nvcc", row["ratio"] >= 5)
        cold = hyperfine([("kiln", kiln_cmd), ("kiln nvrtc", f"env KILN_CUDA_TOOLCHAIN=nvrtc {kiln_cmd}")], max(3, runs // 2), 1,
                         prepare=f"rm -rf {work}/c")
        add("cuda-compile", f"{op}: the same with an empty cache (its header artifact made too, on the other core)", cold["kiln"],
            kiln_cmd.replace(f"{work}/c", "DIR"), t["nvcc"], nvcc_cmd)
        add("cuda-compile", f"{op}: the same through NVRTC (what kiln did before), empty cache", cold["kiln nvrtc"],
            f"env KILN_CUDA_TOOLCHAIN=nvrtc {kiln_cmd.replace(work + '/c', 'DIR')}", t["nvcc"], nvcc_cmd)
