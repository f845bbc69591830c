#!/usr/bin/env python3
"""Warm hits through kiln's store next to the folders their users keep today, each pair measured
side by side in one run:

  triton    triton.compile of a kernel an earlier process cached: kiln.triton's CacheManager
            against Triton's own FileCacheManager, both caches warm. Both sides in one process,
            alternating call by call (a process's hit times vary by +-15% from one process to the
            next on a shared VM, more than what is compared).
  inductor  one C++ kernel module of torch.compile found built: through kiln.inductor (Inductor's
            folder empty, kiln's store warm: what a second node or a fresh folder pays) against
            Inductor's own folder with the .so in it (CppCodeCache.load, its memory cleared, a
            fresh copy of the folder each time so that both sides dlopen a new .so). Alternating in
            one process.
  triton-lookup
            the cache's part of that hit alone: get_cache_manager(key).get_group(name).
  torch     a torch C++ extension found built, in a fresh process each: kiln.torch.load against
            torch.utils.cpp_extension.load with its build folder warm (whole processes, `import
            torch` included on both sides, alternating).

    tools/bench/store_hits.py [--only triton,triton-lookup,inductor,torch,files] [--runs 3] [--reps 200] [--json FILE]

Prints one line per pair: median (min..max) of each side over the runs' medians, and the ratio.
tools/bench/compare can import it: `rows = store_hits.measure(build, work, sections, runs, reps)`
gives dicts {"section", "what", "kiln": samples_ms, "peer": samples_ms, "kiln_how", "peer_how"}
(one median per run on each side), ready for its stats_ms() and add().

It needs the venv of scripts/setup (torch 2.x, Triton) and a build (KILN_BUILD_DIR or build/).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VENV_PYTHON = os.path.join(os.path.expanduser("~"), ".local/share/kiln-dev/venv/bin/python")

# sys.argv: reps ("0": fill both caches and exit). Prints RESULT {side: {kernel: [ms, ...]}}.
TRITON_HIT = r"""
import json, os, sys, time
import torch  # a torch.compile process has it; Triton's compile costs ~0.3 ms more with it imported, kiln or not
import triton, triton_kernels as tk
def side(name):
    if name == "kiln":
        os.environ["TRITON_CACHE_MANAGER"] = "kiln.triton:CacheManager"
    else:
        os.environ.pop("TRITON_CACHE_MANAGER", None)
srcs = tk.sources()
for s in ("kiln", "own"):
    side(s)
    for name, (src, opt) in srcs.items():
        triton.compile(src, target=tk.TARGET, options=opt)
reps = int(sys.argv[1])
if reps == 0:
    print("RESULT {}")
    sys.exit(0)
profile = os.environ.get("STORE_HITS_PROFILE")
out = {"kiln": {}, "own": {}}
for name, (src, opt) in srcs.items():
    ts = {"kiln": [], "own": []}
    for i in range(reps):
        for s in (("kiln", "own") if i % 2 else ("own", "kiln")):
            side(s)
            t = time.perf_counter()
            triton.compile(src, target=tk.TARGET, options=opt)
            ts[s].append((time.perf_counter() - t) * 1000)
    for s in ts:
        out[s][name] = ts[s]
if profile:
    import cProfile, pstats
    side(profile)
    src, opt = srcs["matmul"]
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(reps):
        triton.compile(src, target=tk.TARGET, options=opt)
    pr.disable()
    pstats.Stats(pr, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
print("RESULT " + json.dumps(out))
"""

# sys.argv: reps. Prints RESULT {side: [us...]}: the cache's part of a hit alone, for the matmul:
# get_cache_manager(key) then get_group(name), as triton.compile calls them, alternating.
TRITON_LOOKUP = r"""
import json, os, sys, time
import torch, triton, triton_kernels as tk
import triton.compiler.compiler as cc
from triton.runtime import cache as tc
src, opt = tk.sources()["matmul"]
seen = {}
def spy(key):
    seen["key"] = key
    return tc.get_cache_manager(key)
cc.get_cache_manager = spy
def side(name):
    if name == "kiln":
        os.environ["TRITON_CACHE_MANAGER"] = "kiln.triton:CacheManager"
    else:
        os.environ.pop("TRITON_CACHE_MANAGER", None)
for s in ("kiln", "own"):
    side(s)
    triton.compile(src, target=tk.TARGET, options=opt)
key, name = seen["key"], src.name + ".json"
out = {"kiln": [], "own": []}
for i in range(int(sys.argv[1]) * 10):
    for s in (("kiln", "own") if i % 2 else ("own", "kiln")):
        side(s)
        t = time.perf_counter()
        assert tc.get_cache_manager(key).get_group(name)
        out[s].append((time.perf_counter() - t) * 1e6)
print("RESULT " + json.dumps(out))
"""

# sys.argv: reps, a work folder. Prints RESULT {"kiln": [ms...], "own": [ms...]}: CppCodeCache.load of
# one C++ kernel module Inductor generated, its memory cleared each time; kiln's side with
# Inductor's folder empty (a fresh one each time) and kiln's store warm, Inductor's side with a fresh
# copy of its warm folder (so that both load a .so neither has loaded before: a real dlopen each).
INDUCTOR_HIT = r"""
import glob, json, os, shutil, sys, time
reps, work = int(sys.argv[1]), sys.argv[2]
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(work, "gen")
os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
import torch
from torch._inductor import codecache
import kiln.inductor
fn = torch.compile(lambda x, y: (x * y + 1).relu().sum(-1))
fn(torch.randn(64, 64), torch.randn(64, 64))
sources = [p for p in glob.glob(os.path.join(work, "gen", "**", "*.cpp"), recursive=True) if "extern \"C\"" in open(p).read()]
src = open(sorted(sources, key=os.path.getsize)[-1]).read()
def load(folder, through_kiln):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    (kiln.inductor.install if through_kiln else kiln.inductor.uninstall)()
    codecache.CppCodeCache.cache.clear()
    t = time.perf_counter()
    codecache.CppCodeCache.load(src)
    return (time.perf_counter() - t) * 1000
own = os.path.join(work, "own")
load(own, False)                                  # Inductor's own folder, built by g++
load(os.path.join(work, "kiln-fill"), True)       # kiln's store, built through kiln
out = {"kiln": [], "own": []}
for i in range(reps):
    copy = os.path.join(work, "own-%d" % i)
    shutil.copytree(own, copy)
    fresh = os.path.join(work, "kiln-%d" % i)
    for side in (("kiln", "own") if i % 2 else ("own", "kiln")):
        out[side].append(load(fresh, True) if side == "kiln" else load(copy, False))
print("RESULT " + json.dumps(out))
"""

# sys.argv: reps. Prints RESULT {"kiln": [us...]}: find_files of a stored group of 8 files (720 KB,
# a Triton matmul's size) once its copies have settled: the stamp checked by a stat of each.
FILES_HIT = r"""
import json, os, sys, time
import kiln
ctx = kiln.context("none")._ctx
files = [("f%d.bin" % i, os.urandom(90000)) for i in range(8)]
ctx.store_files("triton-group", "store_hits files", files, label="files", target="cuda:sm_90")
time.sleep(1.2)  # settled: a stamp is written for files at least a second old
for _ in range(3):
    ctx.find_files("triton-group", "store_hits files")
ts = []
for _ in range(int(sys.argv[1]) * 10):
    t = time.perf_counter()
    ctx.find_files("triton-group", "store_hits files")
    ts.append((time.perf_counter() - t) * 1e6)
print("RESULT " + json.dumps({"kiln": ts}))
"""

TORCH_EXT = r"""
#include <torch/extension.h>
torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b, double s) { return a + b * s; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scaled_add", &scaled_add, "a + b * s"); }
"""

# sys.argv: side ("kiln" or "own"), the source. Prints RESULT ms of the load alone.
TORCH_LOAD = r"""
import json, sys, time
import torch
side, src = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if side == "kiln":
    import kiln.torch
    m = kiln.torch.load("store_hits_ext", [src])
else:
    from torch.utils import cpp_extension
    m = cpp_extension.load("store_hits_ext", [src])
ms = (time.perf_counter() - t) * 1000
assert float(m.scaled_add(torch.ones(2), torch.ones(2), 2.0)[0]) == 3.0
print("RESULT " + json.dumps(ms))
"""


def _env(build, extra):
    env = dict(os.environ)
    for var in ("TRITON_CACHE_MANAGER", "TRITON_CACHE_DIR", "KILN_CACHE_DIR", "KILN_REMOTE_CACHE", "TORCH_EXTENSIONS_DIR",
                "TORCHINDUCTOR_CACHE_DIR", "PYTHONPATH", "STORE_HITS_PROFILE"):
        env.pop(var, None)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(build, "python"), os.path.join(ROOT, "tests", "python")])
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env.update(extra)
    return env


def _run(cmd, env):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stderr[-3000:]))
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if not line:
        raise RuntimeError("%s printed no result:\n%s" % (" ".join(cmd), r.stderr[-3000:]))
    if r.stderr.strip() and os.environ.get("STORE_HITS_PROFILE"):
        sys.stderr.write(r.stderr)
    return json.loads(line[-1][len("RESULT "):])


def triton_rows(build, work, runs, reps):
    script = os.path.join(work, "triton_hit.py")
    with open(script, "w") as f:
        f.write(TRITON_HIT)
    env = _env(build, {"KILN_CACHE_DIR": os.path.join(work, "triton-kiln"), "TRITON_CACHE_DIR": os.path.join(work, "triton-own")})
    _run([VENV_PYTHON, script, "0"], env)  # the caches, made by a process of their own, as a node finds them
    per_run = []
    for _ in range(runs):
        per_run.append(_run([VENV_PYTHON, script, str(reps)], env))
    rows = []
    for name in per_run[0]["kiln"]:
        rows.append({"section": "triton",
                     "what": "warm hit: triton.compile of the cached %s kernel in a resident process (median of %d per side and run, "
                             "the sides alternating in one process)" % (name, reps),
                     "kiln": [statistics.median(r["kiln"][name]) for r in per_run],
                     "peer": [statistics.median(r["own"][name]) for r in per_run],
                     "kiln_how": "TRITON_CACHE_MANAGER=kiln.triton:CacheManager",
                     "peer_how": "Triton's FileCacheManager, its folder warm"})
    return rows


def torch_rows(build, work, runs, reps):
    src = os.path.join(work, "store_hits_ext.cpp")
    with open(src, "w") as f:
        f.write(TORCH_EXT)
    script = os.path.join(work, "torch_load.py")
    with open(script, "w") as f:
        f.write(TORCH_LOAD)
    env = _env(build, {"KILN_CACHE_DIR": os.path.join(work, "torch-kiln"), "TORCH_EXTENSIONS_DIR": os.path.join(work, "torch-own")})
    for side in ("kiln", "own"):
        _run([VENV_PYTHON, script, side, src], env)  # built once
    per_run = []
    n = max(3, reps // 20)
    for _ in range(runs):
        t = {"kiln": [], "own": []}
        for i in range(n):
            for side in (("kiln", "own") if i % 2 else ("own", "kiln")):
                t[side].append(_run([VENV_PYTHON, script, side, src], env))
        per_run.append(t)
    return [{"section": "torch",
             "what": "a built torch extension loaded again in a fresh process (the load call alone; median of %d per side and run, "
                     "the sides alternating)" % n,
             "kiln": [statistics.median(r["kiln"]) for r in per_run], "peer": [statistics.median(r["own"]) for r in per_run],
             "kiln_how": "kiln.torch.load(name, [source])", "peer_how": "torch.utils.cpp_extension.load(name, [source]), build folder warm"}]


def triton_lookup_rows(build, work, runs, reps):
    script = os.path.join(work, "triton_lookup.py")
    with open(script, "w") as f:
        f.write(TRITON_LOOKUP)
    env = _env(build, {"KILN_CACHE_DIR": os.path.join(work, "lookup-kiln"), "TRITON_CACHE_DIR": os.path.join(work, "lookup-own")})
    per_run = [_run([VENV_PYTHON, script, str(reps)], env) for _ in range(runs)]
    return [{"section": "triton", "what": "the cache's part of the matmul's hit alone: get_cache_manager(key).get_group(name) (us; "
                                          "median of %d per side and run, alternating)" % (reps * 10),
             "kiln": [statistics.median(r["kiln"]) for r in per_run], "peer": [statistics.median(r["own"]) for r in per_run],
             "kiln_how": "kiln.triton's CacheManager", "peer_how": "Triton's FileCacheManager", "unit": "us"}]


def files_rows(build, work, runs, reps):
    script = os.path.join(work, "files_hit.py")
    with open(script, "w") as f:
        f.write(FILES_HIT)
    env = _env(build, {"KILN_CACHE_DIR": os.path.join(work, "files-kiln")})
    per_run = [_run([VENV_PYTHON, script, str(reps)], env) for _ in range(runs)]
    return [{"section": "files", "what": "find_files of a settled group of 8 files, 720 KB, in a resident process (us; median of %d "
                                        "per run)" % (reps * 10),
             "kiln": [statistics.median(r["kiln"]) for r in per_run], "peer": None,
             "kiln_how": "kiln.Context.find_files (the group's stamp, then a stat of the blob and of each file)", "peer_how": "",
             "unit": "us"}]


def inductor_rows(build, work, runs, reps):
    script = os.path.join(work, "inductor_hit.py")
    with open(script, "w") as f:
        f.write(INDUCTOR_HIT)
    n = max(5, reps // 20)
    per_run = []
    for r in range(runs):
        folder = os.path.join(work, "inductor-%d" % r)
        os.makedirs(folder)
        # One kiln store for every run: the runs after the first find its PCH and kernel stored.
        per_run.append(_run([VENV_PYTHON, script, str(n), folder], _env(build, {"KILN_CACHE_DIR": os.path.join(work, "inductor-kiln")})))
    return [{"section": "inductor",
             "what": "one C++ kernel module of torch.compile found built, in a resident process (CppCodeCache.load, its memory "
                     "cleared; median of %d per side and run, alternating)" % n,
             "kiln": [statistics.median(r["kiln"]) for r in per_run], "peer": [statistics.median(r["own"]) for r in per_run],
             "kiln_how": "kiln.inductor installed, Inductor's folder empty (a fresh one each time), kiln's store warm",
             "peer_how": "Inductor's own folder with the .so in it (a fresh copy each time: a dlopen on both sides)"}]


SECTIONS = {"triton": triton_rows, "triton-lookup": triton_lookup_rows, "inductor": inductor_rows, "torch": torch_rows,
            "files": files_rows}


def measure(build, work, sections, runs, reps, each=None):
    """The rows of `sections`; `each(rows)` is told each section's rows as they come."""
    rows = []
    for name in sections:
        got = SECTIONS[name](build, work, runs, reps)
        if each:
            each(got)
        rows += got
    return rows


def _spread(samples, unit="ms"):
    return "%.3f %s (%.3f..%.3f)" % (statistics.median(samples), unit, min(samples), max(samples))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="triton,triton-lookup,inductor,torch,files", help="sections, comma-separated: " + ", ".join(SECTIONS))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--build", default=os.environ.get("KILN_BUILD_DIR", os.path.join(ROOT, "build")))
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--profile", choices=["kiln", "own"], help="triton: cProfile one side's matmul hits (stderr)")
    a = p.parse_args()
    if a.profile:
        os.environ["STORE_HITS_PROFILE"] = a.profile
    with tempfile.TemporaryDirectory(prefix="kiln-store-hits-") as work:
        if a.profile:
            script = os.path.join(work, "triton_hit.py")
            with open(script, "w") as f:
                f.write(TRITON_HIT)
            env = _env(os.path.abspath(a.build), {"KILN_CACHE_DIR": os.path.join(work, "k"), "TRITON_CACHE_DIR": os.path.join(work, "o"),
                                                  "STORE_HITS_PROFILE": a.profile})
            _run([VENV_PYTHON, script, "0"], env)
            _run([VENV_PYTHON, script, str(a.reps)], env)
            return 0
        rows = measure(os.path.abspath(a.build), work, [s for s in a.only.split(",") if s], a.runs, a.reps, each=_print)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def _print(rows):
    for r in rows:
        if not r["peer"]:
            print("%-8s %s\n         kiln %s" % (r["section"], r["what"], _spread(r["kiln"], r.get("unit", "ms"))))
            continue
        k, o = statistics.median(r["kiln"]), statistics.median(r["peer"])
        print("%-8s %s\n         kiln %s | peer %s | peer/kiln %.2fx" % (r["section"], r["what"], _spread(r["kiln"], r.get("unit", "ms")),
                                                                            _spread(r["peer"], r.get("unit", "ms")), o / k),
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
