"""a hit in a fresh process: kiln build next to a ccache hit on the same source
"""
import os
import subprocess

from ..harness import add, cpu_level, goal, hyperfine, KILN, ROOT, run, spec_facts


def section(a, work):
    spec = os.path.join(ROOT, "specs/vector_add.toml")
    cache = os.path.join(work, "hit-cache")
    run([KILN, "--cache-dir", cache, "build", spec])
    f = spec_facts("vector_add")
    src = os.path.join(ROOT, "specs", f["sources"][0])
    level = cpu_level()
    ccache_cmd = (f"ccache clang++-22 -std=c++20 -O3 -march={level} -fPIC -I{ROOT}/specs/include -I{ROOT}/backends/cpu/include "
                  f"-c {src} -o {work}/v.o")
    env = dict(os.environ, CCACHE_DIR=os.path.join(work, "ccache"))
    subprocess.run(ccache_cmd.split(), env=env, check=True)  # now a ccache hit
    os.environ["CCACHE_DIR"] = env["CCACHE_DIR"]
    # The same compile through kiln cc, the launcher (docs/LLM-SERVING.md): a hit in its own cache.
    cc_cache = os.path.join(work, "cc-cache")
    kiln_cc_cmd = f"{KILN} --cache-dir {cc_cache} --remote= cc " + ccache_cmd[len("ccache "):].replace("v.o", "v-cc.o")
    subprocess.run(kiln_cc_cmd.split(), env=env, check=True)  # now a kiln cc hit
    runs = 20 if a.quick else 100
    t = hyperfine([("kiln build, hit", f"{KILN} --cache-dir {cache} build {spec}"), ("ccache hit", ccache_cmd),
                   ("kiln cc, hit", kiln_cc_cmd), ("kiln --version", f"{KILN} --version"), ("true", "/bin/true")], runs, 5)
    build_row = add("hit", "a `kiln build` hit in a fresh process", t["kiln build, hit"], f"{KILN} --cache-dir DIR build {spec}",
        t["ccache hit"], ccache_cmd, note="goal: at most 0.6x ccache, within 1 ms of `kiln --version`")
    row = add("hit", "a `kiln cc clang++-22 -c` hit in a fresh process (the compiler launcher) on the same compile",
              t["kiln cc, hit"], kiln_cc_cmd.replace(cc_cache, "DIR"), t["ccache hit"], ccache_cmd)
    goal(row, "no slower than a ccache hit", t["kiln cc, hit"]["median_ms"] <= t["ccache hit"]["median_ms"])
    add("hit", "`kiln --version` (a process that starts and exits)", t["kiln --version"], f"{KILN} --version", t["true"], "/bin/true")
    build_row["versus_version_ms"] = t["kiln build, hit"]["median_ms"] - t["kiln --version"]["median_ms"]
