"""cold compiles per op for cpu, cuda, hip (gfx90a, gfx942, gfx1100; Clang and
hiprtc), opencl and spirv, next to the clang-22 driver; PoCL beside the CPU
backend: launch overhead, op throughput, program load from source or binary
"""
import os
import re

from ..harness import add, bundled_specs, gbench, hyperfine, KILN, nvcc_sources, ROOT, rows, spec_facts
from ..report import fmt_ms


def opencl_source(op):
    m = re.search(r'\[opencl\][^\[]*?sources\s*=\s*\["([^"]+)"', open(os.path.join(ROOT, "specs", op + ".toml")).read(), re.S)
    return m.group(1) if m else None


def section(a, work):
    """Cold compiles of every bundled op per target (kiln warm -j1, whole process), next to the
    clang-22 driver doing the same one op at a time; then PoCL beside the CPU backend."""
    ops = bundled_specs()
    hip_ops = [op for op in ops if spec_facts(op)["cuda_sources"]]
    cl_ops = [op for op in ops if opencl_source(op)]
    ninja_dir = os.path.join(work, "ninja")
    os.makedirs(ninja_dir)
    hip_flags = f"-x hip --cuda-device-only --no-gpu-bundle-output -nogpuinc -nogpulib -O3 -std=c++17 -I{ROOT}/specs/include " \
                f"-I{ROOT}/backends/hip/include -include kiln/hip_prelude.h"
    rules = {"hip:gfx90a": [f"clang-22 {hip_flags} --offload-arch=gfx90a -c {nvcc_sources(op, work)[0]} "
                            f"-o {ninja_dir}/out/{op}.hsaco" for op in hip_ops],
             "spirv": [f"sh -c 'clang-22 --target=spirv64 -cl-std=CL3.0 -O3 -I{ROOT}/specs/include -c {ROOT}/specs/{opencl_source(op)} "
                       f"-o {ninja_dir}/out/{op}.spv && spirv-val {ninja_dir}/out/{op}.spv'" for op in cl_ops]}
    for target, cmds in rules.items():
        lines = ["rule run", "  command = $cmd", ""]
        for i, c in enumerate(cmds):
            lines += [f"build out/{i}.done: run", f"  cmd = {c} && touch {ninja_dir}/out/{i}.done", ""]
        open(os.path.join(ninja_dir, target.replace(":", "_") + ".ninja"), "w").write("\n".join(lines))
    runs = 2 if a.quick else 5
    targets = [("cpu", "", len(ops)), ("cuda:sm_90", "", len([o for o in ops if spec_facts(o)["cuda_sources"]])),
               ("hip:gfx90a", "", len(hip_ops)), ("hip:gfx942", "", len(hip_ops)), ("hip:gfx1100", "", len(hip_ops)),
               ("hip:gfx90a", "hiprtc", len(hip_ops)), ("opencl", "", len(cl_ops)), ("spirv", "", len(cl_ops))]
    for target, toolchain, count in targets:
        env = f"env KILN_HIP_TOOLCHAIN={toolchain} " if toolchain else ""
        commands = [("kiln", f"{env}{KILN} --cache-dir {work}/t warm -j1 -q --target {target}")]
        peer_file = os.path.join(ninja_dir, target.replace(":", "_") + ".ninja")
        if not toolchain and os.path.exists(peer_file):
            commands.append(("peer", f"ninja -f {peer_file} -C {ninja_dir} -j1"))
        try:
            t = hyperfine(commands, runs, 1, prepare=f"rm -rf {work}/t {ninja_dir}/out {ninja_dir}/.ninja_log")
        except RuntimeError as e:
            rows.append({"section": "targets", "what": f"{target}{' via ' + toolchain if toolchain else ''}: could not run",
                         "peer_missing": str(e)[-300:]})
            continue
        per = {k: dict(v, median_ms=v["median_ms"] / count, min_ms=v["min_ms"] / count, max_ms=v["max_ms"] / count) for k, v in t.items()}
        how = {"hip:gfx90a": "clang-22 -x hip --cuda-device-only --offload-arch=gfx90a (kiln's prelude; the driver runs lld) per op",
               "spirv": "clang-22 --target=spirv64 -c per op, then spirv-val"}.get(target)
        add("targets", f"cold compile per op for {target}{' through hiprtc (in kiln-hiprtc)' if toolchain else ''}, "
            f"{count} ops in one process", per["kiln"], f"{env}{KILN} --cache-dir DIR warm -j1 --target {target}, total / {count}",
            per.get("peer"), f"ninja -j1: {how}" if "peer" in per else None,
            missing=None if "peer" in per else "no subprocess peer for this target here")
    r = gbench("kiln_device_bench", "BM_", 1 if a.quick else 3)
    for name, e in sorted(r.items()):
        parts = name.split("/")
        if parts[0] == "BM_Throughput":
            rows.append({"section": "targets", "what": f"{parts[2]} throughput on {'PoCL (OpenCL)' if parts[1] == 'opencl' else 'the CPU backend'}",
                         "throughput_GBps": e["counters"].get("GBps") or 0.0,
                         "note": f"kiln_device_bench {name}; time per pass {fmt_ms({'median_ms': e['median_ms'], 'sd_ms': e.get('stddev_ms')})}"})
        else:
            per = 1000.0 if parts[0] == "BM_LaunchOverhead" else 1.0
            what = {"BM_LaunchOverhead": f"a one-block vector_add launched, queued (per launch; 1,000 then synchronize) on {parts[1]}",
                    "BM_ProgramLoad": f"gelu loaded on PoCL in a fresh Ops: {parts[-1].replace('_', ' ')}"}.get(parts[0], name)
            rows.append({"section": "targets", "what": what, "kiln": {"median_ms": e["median_ms"] / per,
                         "sd_ms": (e.get("stddev_ms") or 0) / per, "n": e["n"], "how": "kiln_device_bench " + name}})
