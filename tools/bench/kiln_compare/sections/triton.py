"""Triton's kernels (the tutorials' vector add, fused softmax, layer norm, matmul,
compiled for sm_90 on this CPU) through kiln.triton: 8 simulated nodes (their own
cache folders; kiln: one Redis) cold-compiling them at once, next to Triton's own
FileCacheManager per node; a warm hit (triton.compile of a cached kernel in a
resident process) next to a hit in Triton's own folder; warming the run's
records on the CPU (kiln warm --triton), then a node loading the kernels from
the bundle next to a node compiling them
"""
import json
import os
import statistics
import subprocess
import sys
import time

from ..harness import add, BENCH, BUILD, child_env, goal, KILN, log, ROOT, run, spread, stats_ms, VENV_PYTHON
from ..servers import redis_flush, start_redis


TRITON_NODE = r"""
import json, os, resource, sys, time
import torch  # a torch.compile process has it (with no GPU driver, kiln's key asks Triton's driver detection, which imports it)
import triton_kernels
open(os.path.join(sys.argv[1], "ready.%d" % os.getpid()), "w").close()
while not os.path.exists(os.path.join(sys.argv[1], "go")):
    time.sleep(0.002)
def cpu():  # ptxas runs as a child
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
c0 = cpu()
res = triton_kernels.compile_kernels(None)
print("RESULT " + json.dumps({"compiles": res["compiles"], "cpu": cpu() - c0, "end": time.time()}))
"""

# A node that needs the four tutorial kernels: compiles them as a node with a GPU of arch
# sys.argv[1] does (Triton's driver answers that target; "none": no driver), and says how long
# the four took in the process and how many were compiled.
TRITON_WARM_NODE = r"""
import contextlib, json, sys, time
import triton, triton_kernels as tk, kiln.triton.warm as warm
from triton.backends.compiler import GPUTarget
arch = sys.argv[1]
target = tk.TARGET if arch == "none" else GPUTarget("cuda", int(arch), 32)
listener = tk.Listener()
t = time.perf_counter()
with (contextlib.nullcontext() if arch == "none" else warm.driver_target(target)):
    for name, (src, opt) in tk.sources().items():
        triton.compile(src, target=target, options=opt)
print("RESULT " + json.dumps({"ms": (time.perf_counter() - t) * 1000, "compiles": listener.compiles}))
"""


def triton_env(extra):
    env = child_env()
    for var in ("TRITON_CACHE_MANAGER", "TRITON_CACHE_DIR"):
        env.pop(var, None)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(BUILD, "python"), os.path.join(ROOT, "tests", "python")])
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env.update(extra)
    return env


def triton_result(out):
    line = [l for l in out.splitlines() if l.startswith("RESULT ")]
    return json.loads(line[-1][len("RESULT "):]) if line else None


def triton_nodes(work, tag, nodes, env_of):
    """`nodes` processes, each its own node, compiling the kernels at once: (wall s, compiles, CPU s, [CPU s per node])."""
    d = os.path.join(work, tag)
    os.makedirs(d)
    script = os.path.join(work, "triton_node.py")
    open(script, "w").write(TRITON_NODE)
    procs = [subprocess.Popen([VENV_PYTHON, script, d], env=triton_env(env_of(i, d)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(nodes)]
    while len([f for f in os.listdir(d) if f.startswith("ready.")]) < nodes:
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.02)
    go = time.time()
    open(os.path.join(d, "go"), "w").close()
    results = []
    for p in procs:
        out, err = p.communicate()
        r = triton_result(out)
        if p.returncode != 0 or r is None:
            raise RuntimeError(f"a Triton node failed ({p.returncode}): {err.strip()[-800:]}")
        results.append(r)
    return max(r["end"] for r in results) - go, sum(r["compiles"] for r in results), sum(r["cpu"] for r in results), \
        [r["cpu"] for r in results]


def section(a, work):
    """Triton's kernels through kiln.triton next to Triton's own FileCacheManager."""
    probe = run([VENV_PYTHON, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import kiln.triton, torch; "
                 "ok, why = kiln.triton.supported(); print(ok, why)", os.path.join(BUILD, "python")], check=False, env=child_env())
    if probe.returncode != 0 or not probe.stdout.startswith("True"):
        add("triton", "Triton through kiln", None, "", missing=(probe.stdout + probe.stderr).strip()[-500:] or "no output")
        return
    redis, port = start_redis(work)
    if not redis:
        add("triton", "Triton through kiln", None, "", missing="redis-server is not installed (scripts/setup)")
        return
    nodes, kernels, runs = 8, 4, 1 if a.quick else 3
    try:
        own_walls, kiln_walls, own_cpu, kiln_cpu, kiln_compiles, own_compiles, warm_cpu, fetch_cpu = [], [], [], [], [], [], [], []
        for i in range(runs):
            w, c, cpu, _ = triton_nodes(work, f"own{i}", nodes, lambda n, d: {"TRITON_CACHE_DIR": os.path.join(d, f"node{n}")})
            own_walls.append(w * 1000), own_cpu.append(cpu), own_compiles.append(c)
            # One node again with its folder warm: what a node that compiles nothing costs through Triton alone.
            _, c, cpu, _ = triton_nodes(work, f"own{i}-warm", 1, lambda n, d: {"TRITON_CACHE_DIR": os.path.join(work, f"own{i}", "node0")})
            warm_cpu.append(cpu)
            redis_flush(port)
            def kiln_node(n, d):  # a node of the cluster: its own folders, the one Redis
                return {"TRITON_CACHE_MANAGER": "kiln.triton:CacheManager", "KILN_CACHE_DIR": os.path.join(d, f"node{n}"),
                        "KILN_REMOTE_CACHE": f"redis://127.0.0.1:{port}", "TRITON_CACHE_DIR": os.path.join(d, f"own{n}")}
            w, c, cpu, _ = triton_nodes(work, f"kiln{i}", nodes, kiln_node)
            kiln_walls.append(w * 1000), kiln_cpu.append(cpu), kiln_compiles.append(c)
            # What one fetch costs a node: one more node, its cache empty, once the cluster has the kernels.
            _, c, cpu, _ = triton_nodes(work, f"kiln{i}-fetch", 1, kiln_node)
            fetch_cpu.append(cpu)
            log(f"compare: triton: run {i + 1}: Triton alone {own_walls[-1] / 1000:.1f} s, {own_compiles[-1]} compiles; "
                f"kiln {kiln_walls[-1] / 1000:.1f} s, {kiln_compiles[-1]} compiles")
        med = statistics.median
        note = (f"compiles: kiln {kiln_compiles}, Triton alone {own_compiles} (per run); CPU seconds of the whole cluster "
                f"(ptxas included): kiln {spread(kiln_cpu, 1)}, Triton alone {med(own_cpu):.1f}; "
                f"a node fetching the kernels through kiln spends {spread(fetch_cpu)} s, "
                f"a node whose Triton folder is warm {spread(warm_cpu)} s")
        row = add("triton", f"{nodes} simulated nodes (own cache folders; kiln: one Redis) cold-compiling the same {kernels} tutorial "
                  "kernels at once (sm_90 cubins, no GPU); wall time of the whole cluster", stats_ms(kiln_walls),
                  f"{nodes} x python (TRITON_CACHE_MANAGER=kiln.triton:CacheManager, KILN_REMOTE_CACHE=redis://...) "
                  "triton_kernels.compile_kernels()", stats_ms(own_walls), f"{nodes} x the same with Triton's FileCacheManager, a folder per node",
                  note=note)
        # The budget: 1/N of Triton's CPU plus the fetches, each fetch what a node with an
        # empty cache spends getting the kernels through kiln (a warm Triton folder, in the note,
        # is the floor of any node that runs them: it fetches nothing).
        budget = med(own_cpu) / nodes + (nodes - 1) * med(fetch_cpu)
        goal(row, f"one compile per kernel ({kernels}) and the cluster's CPU at most 1/{nodes} of Triton's plus {nodes - 1} fetches "
             f"({budget:.1f} s)", all(c == kernels for c in kiln_compiles) and med(kiln_cpu) <= budget)
        # A warm hit in a resident process: triton.compile of a kernel an earlier process cached,
        # through kiln and through Triton's own folder alternating in one process
        # (tools/bench/store_hits.py's TRITON_HIT: a process's hit times vary by +-15% from one
        # process to the next on this VM, more than what is compared).
        if BENCH not in sys.path:
            sys.path.insert(0, BENCH)
        import store_hits
        script = os.path.join(work, "triton_hit.py")
        open(script, "w").write(store_hits.TRITON_HIT)
        reps = 50 if a.quick else 200
        by = {"kiln": [], "own": []}
        env = triton_env({"KILN_CACHE_DIR": os.path.join(work, "hit-kiln"), "TRITON_CACHE_DIR": os.path.join(work, "hit-own")})
        run([VENV_PYTHON, script, "0"], env=env)  # the caches, made by a process of their own, as a node finds them
        for i in range(runs):
            r = triton_result(run([VENV_PYTHON, script, str(reps)], env=env).stdout)
            for side_name in by:  # each kernel's median hit of this run
                by[side_name].append({name: statistics.median(times) for name, times in r[side_name].items()})
        for name in by["kiln"][0]:
            k = stats_ms([r[name] for r in by["kiln"]])
            o = stats_ms([r[name] for r in by["own"]])
            row = add("triton", f"warm hit: triton.compile of the cached {name} kernel in a resident process (median of {reps} per side and run, "
                      "the sides alternating in one process)", k,
                      "TRITON_CACHE_MANAGER=kiln.triton:CacheManager: find_or_claim_files (the folder checked by a stat of each "
                      "file and of the blob against its stamp)",
                      o, "Triton's FileCacheManager, its folder warm")
            goal(row, "no slower than a hit in Triton's own folder", k["median_ms"] <= o["median_ms"])
        # The same for the other folders kiln stands in for: a kernel module of torch.compile found
        # built (Inductor's own folder) and a torch extension found built (cpp_extension's).
        for r in store_hits.measure(BUILD, work, ["inductor", "torch"], runs, 50 if a.quick else 200):
            row = add("triton", r["what"], stats_ms(r["kiln"]), r["kiln_how"], stats_ms(r["peer"]), r["peer_how"])
            goal(row, "no slower than " + r["peer_how"], row["kiln"]["median_ms"] <= row["peer"]["median_ms"])
        triton_warm_rows(work, runs)
    finally:
        redis.kill()


def triton_warm_rows(work, runs):
    """Warming on the CPU, then loading on a node: a run (no driver) records the four kernels,
    `python -m kiln warm --triton --target cuda:sm_90` compiles the records in a cache of their
    own, `kiln cache pack`/`unpack` carries it to a node, and the node (Triton's driver answering
    sm_90) has its kernels, next to a node that compiles them itself with Triton's own cache."""
    script = os.path.join(work, "triton_warm_node.py")
    open(script, "w").write(TRITON_WARM_NODE)
    node_ms, own_ms, warm_ms, node_compiles, warm_compiles = [], [], [], [], []
    for i in range(runs):
        d = os.path.join(work, f"warm{i}")
        kiln_env = lambda cache: triton_env({"TRITON_CACHE_MANAGER": "kiln.triton:CacheManager", "KILN_CACHE_DIR": os.path.join(d, cache),
                                             "KILN_REMOTE_CACHE": "", "TRITON_CACHE_DIR": os.path.join(d, "own-" + cache)})
        triton_result(run([VENV_PYTHON, script, "none"], env=kiln_env("run")).stdout)
        run([KILN, "--cache-dir", os.path.join(d, "run"), "cache", "pack", os.path.join(d, "records.bundle")])
        run([KILN, "--cache-dir", os.path.join(d, "builder"), "cache", "unpack", os.path.join(d, "records.bundle")])
        t = time.perf_counter()
        r = run([VENV_PYTHON, "-m", "kiln", "warm", "--triton", "--target", "cuda:sm_90", "--json", "-q"], env=kiln_env("builder"))
        warm_ms.append((time.perf_counter() - t) * 1000)
        warm_compiles.append(sum(1 for x in json.loads(r.stdout) if x["status"] == "compiled"))
        run([KILN, "--cache-dir", os.path.join(d, "builder"), "cache", "pack", os.path.join(d, "warm.bundle")])
        run([KILN, "--cache-dir", os.path.join(d, "node"), "cache", "unpack", os.path.join(d, "warm.bundle")])
        got = triton_result(run([VENV_PYTHON, script, "90"], env=kiln_env("node")).stdout)
        node_ms.append(got["ms"]), node_compiles.append(got["compiles"])
        own = triton_result(run([VENV_PYTHON, script, "90"], env=triton_env({"TRITON_CACHE_DIR": os.path.join(d, "own-node")})).stdout)
        own_ms.append(own["ms"])
        log(f"compare: triton warm: run {i + 1}: warm {warm_ms[-1] / 1000:.1f} s ({warm_compiles[-1]} compiled); node {node_ms[-1]:.0f} ms "
            f"({node_compiles[-1]} compiles) against {own_ms[-1]:.0f} ms compiling")
    row = add("triton", "a node's four tutorial kernels (sm_90) after warming on the CPU: loaded from the unpacked bundle, "
              "in the node's process", stats_ms(node_ms),
              "kiln warm --triton --target cuda:sm_90 on a cache of the run's records, kiln cache pack, unpack on the node",
              stats_ms(own_ms), "the node compiling them itself (Triton's FileCacheManager, its folder empty)",
              note=f"the warm on the CPU: {spread(warm_ms, 1, 1000)} s of wall "
                   f"time for {warm_compiles} compiles per run; the node's compiles per run: {node_compiles}")
    goal(row, "the node compiles nothing", all(c == 0 for c in node_compiles))
