"""a hit in a fresh process: kiln build next to a ccache hit on the same source;
the work each does above a process's start (/bin/true), in interleaved rounds
"""
import os
import subprocess

from ..harness import add, cpu_level, Floor, goal, hyperfine, interleaved, KILN, ROOT, run, spec_facts, stats_ms

FLOORED = True  # compare --check: this section must measure its floored row

# What a kiln hit may cost above a process's start, against ccache's: the goal is half (issue
# 47). The floor trips when kiln does 0.6 of ccache's work: above every run it was set from on
# both machine kinds CI may land on (Intel 0.38-0.44x, AMD EPYC 0.46-0.52x), and below all of
# issue 47's fall (0.63-0.79x on AMD, a file made per hit process).
HIT_FLOOR = Floor(min_ratio=1 / 0.6, source=(
    "tools/bench/compare --ci, 2 cores, quiet, 2026-12-04: ccache's work over kiln's 2.3-2.6x in 6 runs on an Intel Xeon "
    "VM, 1.94-2.18x in 5 runs on an AMD EPYC VM; docs/history/2026-12-04-9945305-compare-ci-floors.md"))


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
    build_cmd = f"{KILN} --cache-dir {cache} build {spec}"
    work_row(a, build_cmd, spec, ccache_cmd)
    if getattr(a, "ci", False):  # --ci: only the floored row
        return
    # The same compile through kiln cc, the launcher (docs/LLM-SERVING.md): a hit in its own cache.
    cc_cache = os.path.join(work, "cc-cache")
    kiln_cc_cmd = f"{KILN} --cache-dir {cc_cache} --remote= cc " + ccache_cmd[len("ccache "):].replace("v.o", "v-cc.o")
    subprocess.run(kiln_cc_cmd.split(), env=env, check=True)  # now a kiln cc hit
    runs = 20 if a.quick else 100
    t = hyperfine([("kiln build, hit", build_cmd), ("ccache hit", ccache_cmd),
                   ("kiln cc, hit", kiln_cc_cmd), ("kiln --version", f"{KILN} --version"), ("true", "/bin/true")], runs, 5)
    build_row = add("hit", "a `kiln build` hit in a fresh process", t["kiln build, hit"], f"{KILN} --cache-dir DIR build {spec}",
        t["ccache hit"], ccache_cmd, note="goal: at most 0.6x ccache, within 1 ms of `kiln --version`")
    row = add("hit", "a `kiln cc clang++-22 -c` hit in a fresh process (the compiler launcher) on the same compile",
              t["kiln cc, hit"], kiln_cc_cmd.replace(cc_cache, "DIR"), t["ccache hit"], ccache_cmd)
    goal(row, "no slower than a ccache hit", t["kiln cc, hit"]["median_ms"] <= t["ccache hit"]["median_ms"])
    add("hit", "`kiln --version` (a process that starts and exits)", t["kiln --version"], f"{KILN} --version", t["true"], "/bin/true")
    build_row["versus_version_ms"] = t["kiln build, hit"]["median_ms"] - t["kiln --version"]["median_ms"]


def work_row(a, build_cmd, spec, ccache_cmd):
    """The `kiln build` hit and the ccache hit above /bin/true's time, each command once per
    round (harness.interleaved): each round's time less that round's /bin/true, median (min..max)
    over the rounds. The ratio is ccache's work over kiln's, the goal 2 (kiln's at most half)."""
    rounds = 100 if a.quick else 300
    samples = {}
    t = interleaved([("kiln", build_cmd), ("ccache", ccache_cmd), ("version", f"{KILN} --version"), ("true", "/bin/true")], rounds,
                    samples_out=samples)
    kiln_work = stats_ms([k - z for k, z in zip(samples["kiln"], samples["true"])])
    ccache_work = stats_ms([c - z for c, z in zip(samples["ccache"], samples["true"])])
    note = (f"medians in {rounds} rounds (each command once per round, the order turned): kiln build {t['kiln']['median_ms']:.2f} ms, "
            f"ccache {t['ccache']['median_ms']:.2f} ms, kiln --version {t['version']['median_ms']:.2f} ms, /bin/true "
            f"{t['true']['median_ms']:.2f} ms; kiln's work is {kiln_work['median_ms'] / ccache_work['median_ms']:.2f}x ccache's")
    row = add("hit", "a `kiln build` hit's work above a process's start (its time less /bin/true's in the same round), next to a ccache hit's",
              kiln_work, f"{KILN} --cache-dir DIR build {spec}, less /bin/true", ccache_work, ccache_cmd + ", less /bin/true", note=note)
    goal(row, "at most 0.5x ccache's work", row["ratio"] >= 2, floor=HIT_FLOOR)
