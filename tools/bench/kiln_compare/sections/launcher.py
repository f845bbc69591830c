"""FlashInfer's JIT modules (silu_and_mul and, without --quick, norm; sm_90, compiled
with no GPU) built through a compiler launcher in FLASHINFER_NVCC_LAUNCHER and
FLASHINFER_CXX_LAUNCHER: kiln cc, ccache 4.7 with its Redis remote storage, sccache with
its Redis backend, each with the same fresh Redis. Node 1 cold, then node 2 (its own
cache folder, its workspace in another folder), then 3 nodes starting at once: seconds
to ready and compiles, each tool its own fresh run
"""
import json
import os
import shutil
import subprocess
import time

from ..harness import add, child_env, goal, KILN, log, NVCC, run, VENV_PYTHON
from ..servers import free_port, redis_flush, start_redis

NODE = r"""
import json, sys, time
t = time.time()
from flashinfer.jit.activation import gen_act_and_mul_module
from flashinfer.jit.norm import gen_norm_module
specs = {"silu": lambda: gen_act_and_mul_module("silu"), "norm": gen_norm_module}
for name in sys.argv[1].split(","):
    spec = specs[name]()
    spec.build()
    spec.load()
print("RESULT " + json.dumps({"end": time.time(), "seconds": time.time() - t}))
"""


def node_env(tool, work, node, port):
    base = os.path.join(work, tool, node)
    env = child_env()
    env.update({"FLASHINFER_WORKSPACE_BASE": base, "FLASHINFER_CUDA_ARCH_LIST": "9.0", "CUDA_HOME": os.path.dirname(os.path.dirname(NVCC)),
                "PATH": os.path.dirname(NVCC) + os.pathsep + env["PATH"]})
    redis = f"redis://127.0.0.1:{port}"
    if tool == "kiln":
        launcher = KILN + " cc"
        env.update({"KILN_CACHE_DIR": os.path.join(base, "kiln-cache"), "KILN_REMOTE_CACHE": redis, "KILN_CC_BASEDIR": base})
    elif tool == "ccache":
        launcher = shutil.which("ccache")
        env.update({"CCACHE_DIR": os.path.join(base, "ccache"), "CCACHE_REMOTE_STORAGE": redis, "CCACHE_BASEDIR": base,
                    "CCACHE_NOHASHDIR": "1"})
    else:
        launcher = shutil.which("sccache") or os.path.join(os.path.dirname(VENV_PYTHON), "sccache")
        env.update({"SCCACHE_DIR": os.path.join(base, "sccache"), "SCCACHE_REDIS_ENDPOINT": redis, "SCCACHE_BASEDIRS": base,
                    "SCCACHE_SERVER_PORT": str(free_port()), "SCCACHE_IDLE_TIMEOUT": "0"})
    env.update({"FLASHINFER_NVCC_LAUNCHER": launcher, "FLASHINFER_CXX_LAUNCHER": launcher})
    return env


def compiles(tool, env):
    """How many compiles the node's launcher ran (its own counters)."""
    if tool == "kiln":
        return json.loads(run([KILN, "cache", "stats", "--json"], env=env).stdout)["compiles"]
    if tool == "ccache":
        # A miss, or a call it could not cache (FlashInfer's nvcc compile: preprocessor_error with
        # ccache 4.7): the compiler ran either way. Every counter of a call but the hits and the
        # counters that only say which lookups missed (and not what ran).
        stats = dict(l.split("\t") for l in run(["ccache", "--print-stats"], env=env).stdout.splitlines() if "\t" in l)
        not_calls = ("direct_cache_miss", "preprocessed_cache_miss", "cleanups_performed", "files_in_cache", "cache_size_kibibyte")
        return sum(int(v) for k, v in stats.items()
                   if v.isdigit() and "hit" not in k and "storage" not in k and not k.startswith("stats_") and k not in not_calls)
    out = run([env["FLASHINFER_NVCC_LAUNCHER"], "--show-stats", "--stats-format", "json"], env=env).stdout
    return int(json.loads(out)["stats"]["cache_misses"]["counts"].get("CUDA", 0) + json.loads(out)["stats"]["cache_misses"]["counts"].get("C/C++", 0))


def nodes_at_once(tool, work, names, port, modules, script):
    envs = [node_env(tool, work, n, port) for n in names]
    start = time.time()
    procs = [subprocess.Popen([VENV_PYTHON, script, modules], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for e in envs]
    ends = []
    for p in procs:
        out, err = p.communicate()
        line = [l for l in out.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            raise RuntimeError(f"a {tool} node failed ({p.returncode}): {err.strip()[-800:]}")
        ends.append(json.loads(line[-1][7:])["end"])
    total = sum(compiles(tool, e) for e in envs)
    if tool == "sccache":
        for e in envs:
            run([e["FLASHINFER_NVCC_LAUNCHER"], "--stop-server"], env=e, check=False)
    return max(ends) - start, total


def section(a, work):
    """FlashInfer's JIT through kiln cc, ccache + Redis and sccache + Redis."""
    probe = run([VENV_PYTHON, "-c", "import flashinfer.jit.norm"], check=False, env=child_env())
    if probe.returncode != 0 or not NVCC:
        add("launcher", "FlashInfer through a compiler launcher", None, "",
            missing="flashinfer-python or nvcc is not installed (scripts/setup): " + probe.stderr.strip()[-300:])
        return
    redis, port = start_redis(work)
    if not redis:
        add("launcher", "FlashInfer through a compiler launcher", None, "", missing="redis-server is not installed (scripts/setup)")
        return
    modules = "silu" if a.quick else "silu,norm"
    script = os.path.join(work, "flashinfer_node.py")
    open(script, "w").write(NODE)
    tools = [t for t in ("kiln", "ccache", "sccache") if t == "kiln" or shutil.which(t) or os.path.exists(os.path.join(os.path.dirname(VENV_PYTHON), t))]
    figures = {}
    try:
        for tool in tools:
            log(f"compare: launcher: {tool}")
            redis_flush(port)
            one = nodes_at_once(tool, work, ["node1"], port, modules, script)
            two = nodes_at_once(tool, work, [os.path.join("elsewhere", "deeper", "node2")], port, modules, script)
            # The floor: node 1 again, every module in its own folder already (FlashInfer loads them).
            floor = nodes_at_once(tool, work, ["node1"], port, modules, script)
            redis_flush(port)
            three = nodes_at_once(tool, work, ["at-once-a", "at-once-b", "at-once-c"], port, modules, script)
            figures[tool] = {"node1": one, "node2": two, "three": three, "floor": floor}
    finally:
        redis.terminate()
    k = figures["kiln"]
    kiln_node2 = (f"kiln cc: node 1 {k['node1'][0]:.1f} s, {k['node1'][1]} compiles; node 2 {k['node2'][1]} compiles; "
                  f"node 1 again, its modules built (the floor): {k['floor'][0]:.1f} s")
    kiln_three = f"kiln cc: {k['three'][1]} compiles"
    for tool, f in figures.items():
        if tool == "kiln":
            continue
        row = add("launcher", f"FlashInfer {modules} for sm_90: node 2 (its workspace elsewhere) to ready, after node 1 through the same Redis "
                  f"({kiln_node2})",
                  {"median_ms": k["node2"][0] * 1000, "min_ms": k["node2"][0] * 1000, "max_ms": k["node2"][0] * 1000, "n": 1},
                  kiln_node2,
                  {"median_ms": f["node2"][0] * 1000, "min_ms": f["node2"][0] * 1000, "max_ms": f["node2"][0] * 1000, "n": 1},
                  f"{tool} + Redis: node 1 {f['node1'][0]:.1f} s, {f['node1'][1]} compiles; node 2 {f['node2'][1]} compiles")
        goal(row, f"node 2 at least 4x faster than node 1 and no slower than {tool}'s node 2",
             k["node1"][0] >= 4 * k["node2"][0] and k["node2"][0] <= f["node2"][0])
        row = add("launcher", f"FlashInfer {modules} for sm_90: 3 nodes starting at once through one Redis, to all ready "
                  f"({kiln_three})",
                  {"median_ms": k["three"][0] * 1000, "min_ms": k["three"][0] * 1000, "max_ms": k["three"][0] * 1000, "n": 1},
                  kiln_three,
                  {"median_ms": f["three"][0] * 1000, "min_ms": f["three"][0] * 1000, "max_ms": f["three"][0] * 1000, "n": 1},
                  f"{tool} + Redis: {f['three'][1]} compiles")
        goal(row, "each object compiled once among the 3 (what node 1 compiled)", k["three"][1] == k["node1"][1])
