"""each bundled C++ op compiled cold: kiln in a resident process and as a whole
process, next to clang++-22 and g++ subprocesses with the same flags
"""
import os

from ..harness import add, bundled_specs, compiler_command, cpu_level, gbench, hyperfine, KILN, ROOT, run


def section(a, work):
    level = cpu_level()
    resident = gbench("kiln_bench", "BM_CpuCompile/.*/plain", a.reps)
    runs = 5 if a.quick else 20
    for op in bundled_specs():
        out = os.path.join(work, op + ".so")
        kiln_cmd = f"env KILN_PCH=0 {KILN} --cache-dir {work}/cold-{op} build {ROOT}/specs/{op}.toml"
        peers = {"clang++-22": compiler_command("clang++-22", op, out, level), "g++": compiler_command("g++", op, out, level)}
        cmds = [("kiln", kiln_cmd)]
        missing = {}
        for name, cmd in peers.items():
            probe = run(cmd, check=False)
            if probe.returncode != 0:
                first = next((l for l in probe.stderr.splitlines() if "error" in l), probe.stderr.strip()[:200])
                missing[name] = f"{name} cannot compile it: {first.strip()}"
            else:
                cmds.append((name, " ".join(cmd)))
        t = hyperfine(cmds, runs, 2, prepare=f"rm -rf {work}/cold-{op}")
        r = resident.get(f"BM_CpuCompile/{op}/plain")
        if r:
            add("cpu-compile", f"{op}: compile + link, in a resident kiln", {"median_ms": r["median_ms"], "sd_ms": r.get("stddev_ms"), "n": r["n"]},
                "kiln_bench BM_CpuCompile (toolchain loaded, no PCH)", t.get("clang++-22"), " ".join(peers["clang++-22"]),
                missing.get("clang++-22"))
        add("cpu-compile", f"{op}: cold `kiln build`, whole process", t["kiln"], kiln_cmd, t.get("clang++-22"),
            " ".join(peers["clang++-22"]), missing.get("clang++-22"))
        add("cpu-compile", f"{op}: cold `kiln build` vs g++", t["kiln"], kiln_cmd, t.get("g++"), " ".join(peers["g++"]),
            missing.get("g++"))
