"""kiln.torch.load next to torch.utils.cpp_extension.load under Debian's torch 1.13
(/usr/bin/python3) and the venv's torch 2.x, same sources and flags: a first
build, another extension once torch's PCH is stored, a fresh process's warm
load, a second node through Redis, a DeepSpeed-style CPU op; and kiln.op's
launch overhead from Python next to the C++ figure
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import time

from ..harness import add, BUILD, cache_kinds, child_env, gbench, goal, hyperfine_env, log, ROOT, rows, run, section_took, stats_ms, SYSTEM_PYTHON, VENV_PYTHON
from ..python_sources import EXT_DRIVER, LAUNCH_DRIVER, LLTM_SOURCE, NORM_SOURCE
from ..servers import start_redis


KILN_LINE = re.compile(r"kiln: extension (\S+): (\w+) \((\d+) ms compiling, (\d+) ms in all\)")
PY_FLAGS = ["-O2"]  # both sides: what a tutorial user adds to get optimised code


class PyBench:
    """One interpreter's runs: specs written as JSON files, each run a fresh process."""

    def __init__(self, python, label, work):
        self.python, self.label, self.work = python, label, work
        self.count = 0
        self.driver = os.path.join(work, "..", "ext_driver.py")
        # Whether this torch's cpp_extension puts ccache in front of the compiler (torch 2.x does
        # where ccache is installed; 1.13 does not).
        probe = run([python, "-c", "import torch.utils.cpp_extension as c; print(int(hasattr(c, '_wrap_compiler')))"],
                    check=False, env=child_env())
        self.wraps_ccache = probe.stdout.strip().endswith("1") and shutil.which("ccache") is not None

    def spec(self, side, name, sources, flags, includes, check, env):
        self.count += 1
        path = os.path.join(self.work, f"spec-{self.count}.json")
        env = dict(env)
        env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(self.work, "unused-torch-ext"))
        env.setdefault("KILN_CACHE_DIR", os.path.join(self.work, "unused-kiln-cache"))
        # torch 2.x's loader puts ccache in front of the compiler where it is installed: each run
        # gets an empty ccache of its own unless it names one, so that a cold build is cold.
        env.setdefault("CCACHE_DIR", os.path.join(self.work, f"ccache-{self.count}"))
        json.dump({"side": side, "name": name, "sources": sources, "flags": flags, "includes": includes, "check": check,
                   "env": env, "kiln_python": os.path.join(BUILD, "python")}, open(path, "w"))
        return path

    def command(self, spec_path):
        return f"{self.python} {self.driver} {spec_path}"

    def load(self, side, name, sources, flags, includes, check, env):
        """One fresh process: {import_ms, load_ms, whole_ms, source?, compile_ms?}."""
        path = self.spec(side, name, sources, flags, includes, check, env)
        start = time.perf_counter()
        r = subprocess.run([self.python, self.driver, path], env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=1800)
        whole = (time.perf_counter() - start) * 1000
        if r.returncode != 0:
            raise RuntimeError(f"{side} load of {name} under {self.label} failed ({r.returncode}):\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
        data = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
        data["whole_ms"] = whole
        if side == "kiln":
            m = KILN_LINE.search(r.stdout)
            if not m:
                raise RuntimeError(f"kiln.torch.load printed no verbose line under {self.label}:\n{r.stdout[-1500:]}")
            data["source"], data["compile_ms"], data["kiln_line"] = m.group(2), int(m.group(3)), m.group(0)
        log(f"compare: python: {self.label}: {side} {name}: load {data['load_ms'] / 1000:.2f} s, whole {whole / 1000:.2f} s"
            + (f" ({data['source']})" if side == "kiln" else ""))
        return data


def section(a, work):
    """kiln.torch.load next to torch.utils.cpp_extension.load (same run, same sources and flags)
    under Debian's torch 1.13 and the venv's torch 2.x; a second node through Redis; a
    DeepSpeed-style CPU op; kiln.op's launch overhead from Python next to C++'s."""
    started, load_before = time.monotonic(), os.getloadavg()
    head = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
    dirty = run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!tools/bench/compare", ":!tools/bench/kiln_compare",
                 ":!docs/BENCHMARKS.md"], check=False).stdout.strip()
    rows.append({"section": "python", "what": "kiln measured",
                 "note": f"the build in {BUILD}{' (KILN_BUILD_DIR)' if os.environ.get('KILN_BUILD_DIR') else ''}, of commit {head}" + (" with uncommitted changes in the tree" if dirty else "")})
    open(os.path.join(work, "ext_driver.py"), "w").write(EXT_DRIVER)
    open(os.path.join(work, "launch_driver.py"), "w").write(LAUNCH_DRIVER)
    lltm = os.path.join(work, "lltm.cpp")
    norm = os.path.join(work, "fused_norm.cpp")
    open(lltm, "w").write(LLTM_SOURCE)
    open(norm, "w").write(NORM_SOURCE)
    pythons = []
    for path, where in ((SYSTEM_PYTHON, "Debian's python3-torch"), (VENV_PYTHON, "scripts/setup's venv")):
        if not os.access(path, os.X_OK):
            add("python", f"torch under {path}", None, "", missing=f"{path} is not here ({where}; scripts/setup)")
            continue
        probe = run([path, "-c", "import os, sys, numpy, torch; sys.path.insert(0, sys.argv[1]); import kiln; "
                     "print(torch.__version__, os.path.dirname(torch.__file__))", os.path.join(BUILD, "python")],
                    check=False, env=child_env())
        if probe.returncode != 0:
            last = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "no output"
            add("python", f"torch under {path}", None, "", missing=f"torch, numpy or kiln does not import under {path}: {last}")
            continue
        version, torch_dir = probe.stdout.split()
        pythons.append((path, f"torch {version}", torch_dir))
    # Both sides read torch's headers from the page cache: the first build should not pay the disk.
    for _, _, torch_dir in pythons:
        for root, _, files in os.walk(os.path.join(torch_dir, "include")):
            for f in files:
                try:
                    with open(os.path.join(root, f), "rb") as fh:
                        while fh.read(1 << 20):
                            pass
                except OSError:  # Debian's torch ships dangling links (include/TH)
                    pass
    reps = 1 if a.quick else 3
    cpp_launch = None
    for python, label, _ in pythons:
        tag = "t" + re.sub(r"\W", "", label.split()[1])[:6]
        d = os.path.join(work, tag)
        os.makedirs(d)
        try:
            python_torch_rows(a, d, PyBench(python, label, d), lltm, norm, reps)
        except Exception as e:  # one interpreter that cannot run is a row that says why
            rows.append({"section": "python", "what": f"[{label}] could not run", "peer_missing": str(e)[:1500]})
            log(f"compare: python: {label} failed: {e}")
        try:
            cpp_launch = python_launch_rows(a, d, python, label, cpp_launch)
        except Exception as e:
            rows.append({"section": "python", "what": f"[{label}] kiln.op launch: could not run", "peer_missing": str(e)[:1500]})
            log(f"compare: python: {label} launch failed: {e}")
    section_took("python", started, load_before)


def lines(path):
    return sum(1 for _ in open(path))


def python_torch_rows(a, d, pb, lltm, norm, reps):
    L = pb.label
    peer_load = (f"{pb.python} ext_driver.py: torch.utils.cpp_extension.load(name, sources, extra_cflags={PY_FLAGS!r}) "
                 "timed inside the process")
    empty = ", empty TORCH_EXTENSIONS_DIR" + (" and CCACHE_DIR (this torch compiles through ccache)" if pb.wraps_ccache else "")

    # 1. The very first build: empty kiln cache (no torch PCH yet), empty TORCH_EXTENSIONS_DIR.
    k1, t1 = [], []
    for i in range(reps):
        k = pb.load("kiln", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": f"{d}/k1-{i}"})
        if k["source"] != "compiled":
            raise RuntimeError(f"an empty cache said {k['source']}: {k['kiln_line']}")
        k1.append(k)
        t1.append(pb.load("torch", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"TORCH_EXTENSIONS_DIR": f"{d}/t1-{i}",
                                                                               "CCACHE_DIR": f"{d}/ccache1-{i}"}))
    kiln_how = f"kiln.torch.load(same arguments) in {pb.python}, empty KILN_CACHE_DIR"
    row = add("python", f"[{L}] lltm.cpp ({lines(lltm)} lines), cold, empty caches: load()",
              stats_ms([x["load_ms"] for x in k1]), kiln_how + ", timed inside the process",
              stats_ms([x["load_ms"] for x in t1]), peer_load + empty,
              note=f"kiln said compiled, {statistics.median(x['compile_ms'] for x in k1):.0f} ms compiling (median); "
                   f"its cache after a run: {', '.join(cache_kinds(f'{d}/k1-0'))}")
    goal(row, ">= 2x the very first time", row["ratio"] >= 2)
    add("python", f"[{L}] the same, whole process (import torch+load+check)",
        stats_ms([x["whole_ms"] for x in k1]), kiln_how + ", whole process",
        stats_ms([x["whole_ms"] for x in t1]), f"{pb.python} ext_driver.py (cpp_extension side), whole process")
    # Where the first build's time goes: the same build without the header artifact.
    nopch = [pb.load("kiln", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": f"{d}/k1n-{i}", "KILN_PCH": "0"})
             for i in range(1)]
    add("python", f"[{L}] lltm.cpp cold, kiln with KILN_PCH=0: load()",
        stats_ms([x["load_ms"] for x in nopch]), f"KILN_PCH=0 kiln.torch.load(same arguments) in {pb.python}, empty KILN_CACHE_DIR (one run)",
        stats_ms([x["load_ms"] for x in t1]), peer_load + empty + " (the row above's runs)",
        note=f"no header artifact made or used (cache after: {', '.join(cache_kinds(f'{d}/k1n-0'))}): "
             "the difference from the row before is what the torch PCH costs a first build")

    # 2. A different extension once the torch PCH is in the store: each run a fresh copy of a
    # cache that holds the PCH (and lltm), so each run is a miss that finds the header artifact.
    base = f"{d}/k1-0"
    pch_before = cache_kinds(base).count("pch")
    k2, t2 = [], []
    for i in range(reps):
        c = f"{d}/k2-{i}"
        shutil.copytree(base, c)
        k = pb.load("kiln", "norm_bench", [norm], PY_FLAGS, [], "norm", {"KILN_CACHE_DIR": c})
        if k["source"] != "compiled":
            raise RuntimeError(f"a new extension said {k['source']}: {k['kiln_line']}")
        if cache_kinds(c).count("pch") != pch_before:
            raise RuntimeError(f"kiln built another torch PCH for fused_norm.cpp ({cache_kinds(c)})")
        k2.append(k)
        t2.append(pb.load("torch", "norm_bench", [norm], PY_FLAGS, [], "norm", {"TORCH_EXTENSIONS_DIR": f"{d}/t2-{i}"}))
    kiln_how2 = f"kiln.torch.load(same arguments) in {pb.python}, KILN_CACHE_DIR a fresh copy of one holding the torch PCH"
    row = add("python", f"[{L}] fused_norm.cpp ({lines(norm)} lines), PCH stored: load()",
              stats_ms([x["load_ms"] for x in k2]), kiln_how2 + ", timed inside the process",
              stats_ms([x["load_ms"] for x in t2]), peer_load + empty,
              note=f"kiln compiled it, no new PCH ({pch_before} in the store before and after)")
    goal(row, ">= 5x once the torch PCH is in the store", row["ratio"] >= 5)
    add("python", f"[{L}] the same, whole process",
        stats_ms([x["whole_ms"] for x in k2]), kiln_how2 + ", whole process",
        stats_ms([x["whole_ms"] for x in t2]), f"{pb.python} ext_driver.py (cpp_extension side), whole process")

    # 3. A fresh process's warm load: kiln from its disk cache, torch from its built folder.
    kspec = pb.spec("kiln", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": f"{d}/k2-0"})
    tspec = pb.spec("torch", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"TORCH_EXTENSIONS_DIR": f"{d}/t1-0"})
    first = pb.load("kiln", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": f"{d}/k2-0"})
    if first["source"] != "disk":
        raise RuntimeError(f"a warm load said {first['source']}: {first['kiln_line']}")
    runs = 5 if a.quick else 15
    if shutil.which("hyperfine"):
        h = hyperfine_env([("kiln", pb.command(kspec)), ("torch", pb.command(tspec))], runs, 2, child_env())
        whole_k, whole_t, how = h["kiln"], h["torch"], f"hyperfine -N --warmup 2 --runs {runs}"
    else:
        ks = [pb.load("kiln", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": f"{d}/k2-0"}) for _ in range(runs)]
        ts = [pb.load("torch", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"TORCH_EXTENSIONS_DIR": f"{d}/t1-0"}) for _ in range(runs)]
        whole_k, whole_t = stats_ms([x["whole_ms"] for x in ks]), stats_ms([x["whole_ms"] for x in ts])
        how = f"{runs} subprocess runs (hyperfine is not installed)"
    row = add("python", f"[{L}] lltm warm load, fresh process: whole process", whole_k,
              f"{pb.python} ext_driver.py SPEC  # kiln.torch.load, a disk hit; {how}", whole_t,
              f"{pb.python} ext_driver.py SPEC  # cpp_extension.load of the built folder; {how}",
              note="both import torch; kiln's side also imports kiln")
    goal(row, "warm load no slower than cpp_extension.load's", whole_k["median_ms"] <= whole_t["median_ms"])
    load_runs = 5 if a.quick else 10
    kl, tl = [], []
    for _ in range(load_runs):
        k = pb.load("kiln", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": f"{d}/k2-0"})
        if k["source"] != "disk":
            raise RuntimeError(f"a warm load said {k['source']}: {k['kiln_line']}")
        kl.append(k["load_ms"])
        tl.append(pb.load("torch", "lltm_bench", [lltm], PY_FLAGS, [], "lltm", {"TORCH_EXTENSIONS_DIR": f"{d}/t1-0"})["load_ms"])
    row = add("python", f"[{L}] lltm warm load, fresh process: load() alone", stats_ms(kl),
              f"kiln.torch.load in {pb.python}, a disk hit, timed inside the process ({load_runs} processes)", stats_ms(tl),
              f"cpp_extension.load of the built folder (it runs ninja, which finds nothing to do), timed inside the process "
              f"({load_runs} processes)")
    goal(row, "warm load no slower than cpp_extension.load's", stats_ms(kl)["median_ms"] <= stats_ms(tl)["median_ms"])
    if pb.wraps_ccache:
        # This torch runs the compiler through ccache: a fresh build folder (another checkout, a
        # cleaned ~/.cache) rebuilds from ccache's hits. Next to kiln's hit in a fresh process.
        tc = [pb.load("torch", "lltm_bench", [lltm], PY_FLAGS, [], "lltm",
                      {"TORCH_EXTENSIONS_DIR": f"{d}/tc-{i}", "CCACHE_DIR": f"{d}/ccache1-0"}) for i in range(max(3, reps) + 1)][1:]
        add("python", f"[{L}] lltm, fresh build folder, ccache warm: load()", stats_ms(kl),
            "kiln.torch.load, a disk hit in a fresh process (the row above's runs)", stats_ms([x["load_ms"] for x in tc]),
            f"cpp_extension.load, empty TORCH_EXTENSIONS_DIR, CCACHE_DIR of row 1's first build (this torch compiles "
            f"through ccache), timed inside the process ({len(tc)} processes after one untimed)")

    # 4. A second node through Redis: node 1 builds from an empty cache (the torch PCH too, and
    # publishes both), node 2 starts with an empty cache and the same Redis; then the first
    # extension of a fresh node, another one, which fetches node 1's torch PCH and compiles.
    redis, port = start_redis(d)
    if not redis:
        add("python", f"[{L}] a second node through Redis", None, "", missing="redis-server is not installed (scripts/setup)")
    else:
        try:
            url = f"redis://127.0.0.1:{port}"
            n1 = f"{d}/node1"
            k = pb.load("kiln", "lltm_node", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": n1, "KILN_REMOTE_CACHE": url})
            if k["source"] != "compiled":
                raise RuntimeError(f"node 1 said {k['source']}: {k['kiln_line']}")
            node2 = []
            for i in range(max(3, reps) + 1):  # the first is a warm-up (page cache, Redis connection paths)
                c = f"{d}/node2-{i}"
                k = pb.load("kiln", "lltm_node", [lltm], PY_FLAGS, [], "lltm", {"KILN_CACHE_DIR": c, "KILN_REMOTE_CACHE": url})
                k["kinds"] = cache_kinds(c)
                node2.append(k)
            clean = all(k["source"] == "remote" and k["compile_ms"] == 0 and k["kinds"] == ["host-so"] for k in node2)
            said = sorted({f"{k['source']}, {k['compile_ms']} ms compiling, cache {'+'.join(k['kinds'])}" for k in node2})
            timed = node2[1:]
            row = add("python", f"[{L}] 2nd node, empty cache, same Redis: load()", stats_ms([x["load_ms"] for x in timed]),
                      f"KILN_REMOTE_CACHE=redis://127.0.0.1:PORT kiln.torch.load in {pb.python}, empty KILN_CACHE_DIR, timed inside the process "
                      f"({len(timed)} node-2 processes after one untimed)",
                      stats_ms([x["load_ms"] for x in t1]),
                      "cpp_extension.load on a second node builds again (row 1's cold figure: it has no shared tier)",
                      note=f"node 2 said: {'; '.join(said)}")
            goal(row, "second node compiles nothing", clean)
            add("python", f"[{L}] the same, whole process", stats_ms([x["whole_ms"] for x in timed]),
                f"node 2's whole process in {pb.python}", stats_ms([x["whole_ms"] for x in t1]), "row 1's cpp_extension whole process")
            fresh = []
            for i in range(reps):
                c = f"{d}/node3-{i}"
                k = pb.load("kiln", f"norm_node{i}", [norm], PY_FLAGS, [], "norm", {"KILN_CACHE_DIR": c, "KILN_REMOTE_CACHE": url})
                k["kinds"] = cache_kinds(c)
                if k["source"] != "compiled" or k["kinds"].count("pch") != 1:
                    raise RuntimeError(f"a fresh node's first extension said {k['source']}, cache {k['kinds']}: {k['kiln_line']}")
                fresh.append(k)
            row = add("python", f"[{L}] fused_norm.cpp, a fresh node's first extension, its cluster tier (Redis) holding the torch PCH: load()",
                      stats_ms([x["load_ms"] for x in fresh]),
                      f"KILN_REMOTE_CACHE=redis://127.0.0.1:PORT kiln.torch.load in {pb.python}, empty KILN_CACHE_DIR "
                      f"(node 1 made and published the PCH), timed inside the process ({reps} nodes)",
                      stats_ms([x["load_ms"] for x in t2]), peer_load + empty + " (row 2's runs)",
                      note=f"each node fetched the torch PCH and built no other (cache after: {'+'.join(fresh[0]['kinds'])}); "
                           f"{statistics.median(x['compile_ms'] for x in fresh):.0f} ms compiling (median)")
            goal(row, ">= 5x cpp_extension.load once the cluster tier holds the torch PCH", row["ratio"] >= 5)
        finally:
            redis.kill()
            redis.wait()

    # 5. A DeepSpeed-style CPU op: several sources, an include folder, AVX intrinsics,
    # -O3 -march=native -fopenmp and the SIMD width, as DeepSpeed's CPU builders pass them.
    ops = os.path.join(ROOT, "tests/python/deepspeed_ops")
    ds_sources = [os.path.join(ops, s) for s in ("adam_kernels.cpp", "adam_registry.cpp", "bindings.cpp")]
    if not all(os.path.isfile(s) for s in ds_sources):
        add("python", f"[{L}] DeepSpeed-style CPU Adam", None, "",
            missing="tests/python/deepspeed_ops/ is not here (its sources are written by another change)")
        return
    cpu_flags = open("/proc/cpuinfo").read()
    simd = "-D__AVX512__" if " avx512f" in cpu_flags else "-D__AVX256__" if " avx2" in cpu_flags else "-D__SCALAR__"
    ds_flags = ["-O3", "-Wno-reorder", "-march=native", "-fopenmp", simd, "-UC10_USE_GLOG"]
    ds_inc = [os.path.join(ops, "include")]
    k5, t5 = [], []
    for i in range(reps):
        k = pb.load("kiln", "ds_cpu_adam", ds_sources, ds_flags, ds_inc, "adam", {"KILN_CACHE_DIR": f"{d}/k5-{i}"})
        if k["source"] != "compiled":
            raise RuntimeError(f"an empty cache said {k['source']}: {k['kiln_line']}")
        k5.append(k)
        t5.append(pb.load("torch", "ds_cpu_adam", ds_sources, ds_flags, ds_inc, "adam", {"TORCH_EXTENSIONS_DIR": f"{d}/t5-{i}"}))
    ds_peer = (f"{pb.python} ext_driver.py: cpp_extension.load(name, 3 sources of tests/python/deepspeed_ops, "
               f"extra_include_paths=[include], extra_cflags={ds_flags!r}), timed inside the process" + empty)
    row = add("python", f"[{L}] DeepSpeed-like Adam (3 srcs), empty caches: load()",
              stats_ms([x["load_ms"] for x in k5]), f"kiln.torch.load(same arguments) in {pb.python}, empty KILN_CACHE_DIR",
              stats_ms([x["load_ms"] for x in t5]), ds_peer,
              note=f"kiln said compiled, {statistics.median(x['compile_ms'] for x in k5):.0f} ms compiling (median); "
                   f"its cache after a run: {', '.join(cache_kinds(f'{d}/k5-0'))}"
                   + (" (these flags need a PCH of their own)" if "pch" in cache_kinds(f"{d}/k5-0") else ""))
    goal(row, ">= 2x the very first time", row["ratio"] >= 2)
    # DeepSpeed's other CPU ops (cpu_adagrad, cpu_lion) use the same flags: with that PCH stored,
    # a second op of this size is a compile. Here: the same sources under another name.
    k5b = []
    for i in range(reps):
        c = f"{d}/k5b-{i}"
        shutil.copytree(f"{d}/k5-0", c)
        before = cache_kinds(c).count("pch")
        k = pb.load("kiln", "ds_cpu_adam_b", ds_sources, ds_flags, ds_inc, "adam", {"KILN_CACHE_DIR": c})
        if k["source"] != "compiled" or cache_kinds(c).count("pch") != before:
            raise RuntimeError(f"the second DeepSpeed-style op: {k['kiln_line']}, {cache_kinds(c)}")
        k5b.append(k)
    row = add("python", f"[{L}] 2nd op with those flags, their PCH stored: load()",
              stats_ms([x["load_ms"] for x in k5b]),
              f"kiln.torch.load(name='ds_cpu_adam_b', the same sources and flags) in {pb.python}, a fresh copy of the cache above",
              stats_ms([x["load_ms"] for x in t5]), ds_peer + " (the row above's runs: cpp_extension shares nothing)",
              note="as cpu_adagrad after cpu_adam; here the same 3 sources under another name, so a real compile")
    goal(row, ">= 5x once the torch PCH is in the store", row["ratio"] >= 5)


def python_launch_rows(a, d, python, label, cpp):
    """kiln.op("vector_add") from Python next to the C++ launch figure of the same run. `cpp`: the
    C++ figure (or {"error": why}) once measured, else None; returned for the next interpreter."""
    path = os.path.join(d, "launch.json")
    json.dump({"env": {"KILN_CACHE_DIR": os.path.join(d, "op-cache")}, "kiln_python": os.path.join(BUILD, "python"),
               "number": 2000, "repeat": 5 if a.quick else 15}, open(path, "w"))
    r = run([python, os.path.join(d, "..", "launch_driver.py"), path], env=child_env())
    f = json.loads(r.stdout.strip().splitlines()[-1])
    if cpp is None:
        try:
            e = gbench("kiln_device_bench", "BM_LaunchOverhead/cpu", a.reps).get("BM_LaunchOverhead/cpu")
            if not e:
                raise RuntimeError("kiln_device_bench gave no BM_LaunchOverhead/cpu")
            cpp = {"median_ms": e["median_ms"] / 1000, "sd_ms": (e.get("stddev_ms") or 0) / 1000, "n": e["n"]}
        except Exception as err:  # the Python figures stand without it; the rows say why
            cpp = {"error": "kiln_device_bench BM_LaunchOverhead/cpu could not run: " + str(err)[:300]}
    cpp_cmd = ("C++: kiln_device_bench BM_LaunchOverhead/cpu: vector_add, n=256 (one block), Kernel::launch through the "
               "builders layer (not kiln::Op), 1,000 queued on the default stream then one synchronize, per launch. "
               "No C++ benchmark here launches through the public API with a synchronize after each launch")
    for kind, what in (("numpy", "numpy floats"), ("torch", "torch floats")):
        for shape, figure in (("sync", f[kind + "_sync"]), ("queued", f[kind + "_queued"])):
            row = {"section": "python",
                   "what": (f"[{label}] kiln.op vector_add, 256 {what}: launch+sync" if shape == "sync"
                            else f"[{label}] the same queued: 1,000, then synchronize"),
                   "kiln": dict(figure, how=(f"{python}: timeit of add(a, b, out, n, grid=1, block=256), per call "
                                             f"(2,000 calls a repeat, median of {figure['n']})" if shape == "sync" else
                                             f"{python}: 1,000 add(..., sync=False) then kiln.context().synchronize(), "
                                             f"per launch (median of {figure['n']})"))}
            if "error" in cpp:
                row["peer_missing"] = cpp["error"]
                rows.append(row)
                continue
            diff = (figure["median_ms"] - cpp["median_ms"]) * 1000
            row.update(peer=dict(cpp, command=cpp_cmd), difference_us=diff,
                       note=f"{diff:+.1f} us above C++'s queued launch" + (", the same shape of launch" if shape == "queued" else ""))
            rows.append(goal(row, "Python launch < 10 us above C++", diff < 10))
    rows.append({"section": "python", "what": f"[{label}] kiln.context().synchronize(), idle stream",
                 "kiln": dict(f["synchronize_idle"], how=f"{python}: timeit, per call"),
                 "note": f"numpy {f['numpy']}"})
    return cpp


def docs():
    """The python section's commands, for the page: what each kiln figure ran, and the scripts."""
    hows = []
    for r in rows:
        how = (r.get("kiln") or {}).get("how")
        if r["section"] == "python" and how and how not in hows:
            hows.append(how)
    goals = [f"- {r['what']}: {r['goal']['text']}: **{'pass' if r['goal']['met'] else 'MISS'}**"
             for r in rows if r.get("goal")]
    return f"""
## The python section: how it ran

Each figure is a fresh Python process running the script below with a JSON spec (the
extension's name, sources, flags and include folders, and the environment: `KILN_CACHE_DIR`,
`TORCH_EXTENSIONS_DIR`, `KILN_REMOTE_CACHE`, `KILN_PCH`). Both sides run the same script, so
the same sources and flags (`extra_cflags={PY_FLAGS!r}` for lltm.cpp and fused_norm.cpp; for the
DeepSpeed-style op the flags in its row), under each interpreter in turn; kiln's side sets
`verbose=True` and the section checks the word it prints (compiled, disk, remote). "load()" is
the load call timed inside the process with `time.perf_counter`; "whole process" is the process
from start to exit (`import torch` included), timed around `subprocess.run` for cold builds and
by hyperfine for warm loads. Cold builds are medians of the runs with (min..max), each with an
empty cache or build folder (or a fresh copy of a cache that holds the torch PCH); torch's
headers are read into the page cache before the first. The extensions (`LLTM_SOURCE`,
`NORM_SOURCE`) are in tools/bench/kiln_compare/python_sources.py; the DeepSpeed-style op is
tests/python/deepspeed_ops. cpp_extension.load runs ninja with its default parallelism (on this
machine's cores). torch 2.x's loader runs the compiler through ccache where ccache is installed
(it is here; torch 1.13's does not): each peer run gets an empty `CCACHE_DIR` of its own, except
in the row that says it reuses one.

kiln's side of each row:

""" + "\n".join(f"- {h}" for h in hows) + """

Goals, each computed from the row's figures:

""" + "\n".join(goals) + """

The process script (`ext_driver.py`):

<!-- not run: the python section runs it, in a fresh process per figure, with a JSON spec -->
```python""" + EXT_DRIVER + """```

The launch script (`launch_driver.py`):

<!-- not run: the python section runs it with a JSON spec -->
```python""" + LAUNCH_DRIVER + """```
"""
