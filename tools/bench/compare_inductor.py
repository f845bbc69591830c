"""tools/bench/compare's torch-compile section: a compiled model's first call on a new node, with
torch.compile's caches and kernels through kiln (kiln.torch.compile_cache) next to torch as
shipped, under the venv's torch 2.x, same models, same run.

Models: the 2-block transformer (d=256, batch 4 x 16, inference: tests/python/inductor_models.py)
and a Hugging Face Llama (2 layers, hidden 256, random weights, a training step with backward).
Every figure is a fresh process (tests/python/compile_cache_node.py) timed from its start to the
end of the model's first call (imports included: kiln's install imports the Inductor modules that
torch imports on its first compile); it also reports the time inside Inductor's lowering (code
generation and C++ builds) and inside the C++ builds, and counts graphs lowered and compiler
commands. Torch's runs use g++ with torch's library folder searched first
(tools/bench/torch-lib-first/g++): on this machine Inductor's own command finds Debian's
libtorch 1.13 first, its ISA probes fail to load and every process runs them again (3 x 2 s)
and gets scalar kernels, which is not what torch does on a machine without that package.

Rows, per model:
- floor: torch's own best case, a fresh process on a node whose caches are all warm (its
  TORCHINDUCTOR_CACHE_DIR holds the FX-graph and AOTAutograd entries and the kernels' .so).
- kiln's new node: a fresh TORCHINDUCTOR_CACHE_DIR, an empty kiln store, only the cluster tier
  (Redis, filled by an earlier kiln node). Goals: within 1.3x of the floor; >= 3x faster than
  torch's new node with torch's own Redis caches.
- torch's new node with torch's Redis remote caches on (FX graph and AOTAutograd, filled by an
  earlier torch node): no lowering, but every kernel built again by g++.
- cold on node 1, kiln (empty store, no tier) next to torch as shipped (no .gch, empty folder):
  goal, kiln never slower.
- 4 ranks at once on one node, own Inductor folders: kiln (one store, the Redis tier) next to
  torch with its Redis caches: graphs lowered and C++ compiles in all, and the wall time.
"""
import json
import os
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
NODE = os.path.join(ROOT, "tests", "python", "compile_cache_node.py")
MODELS = {"transformer": {"MODELS": "transformer", "MODEL_D": "256"},
          "llama": {"MODELS": "llama", "HF_HIDDEN": "256"}}
LABEL = {"transformer": "2-block transformer d=256, inference", "llama": "HF Llama 2 layers hidden 256, train step"}


def run_section(a, work, add, stats_ms, goal, log, child_env, python, build_python, start_redis):
    probe = subprocess.run([python, "-c", "import torch, transformers, redis; assert int(torch.__version__.split('.')[0]) >= 2; "
                            "print(torch.__version__)"], capture_output=True, text=True, env=child_env())
    if probe.returncode != 0:
        add("torch-compile", "torch.compile through kiln", None, "", missing="torch 2.x, transformers and redis are not all installed in "
            + python + " (scripts/setup)")
        return
    torch_version = probe.stdout.strip()
    torch_lib = subprocess.run([python, "-c", "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"],
                               capture_output=True, text=True, env=child_env()).stdout.strip()
    reps = 2 if a.quick else 3
    torch_pch = os.path.join("/tmp", "torchinductor_" + os.environ.get("USER", "root"), "precompiled_headers")

    def fresh(name):
        path = os.path.join(work, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def env_for(model, kiln, store, inductor, redis=None, torch_redis=None):
        env = child_env()
        env.update(MODELS[model])
        env.update({"KILN": "1" if kiln else "0", "KILN_CACHE_DIR": store, "TORCHINDUCTOR_CACHE_DIR": inductor,
                    "PYTHONPATH": build_python, "KILN_REMOTE_CACHE": redis or ""})
        if not kiln:  # like with like: g++ given torch's library folder first (tools/bench/torch-lib-first/g++)
            env.update({"CXX": os.path.join(HERE, "torch-lib-first", "g++"), "KILN_BENCH_TORCH_LIB": torch_lib})
        if torch_redis:  # torch's own Redis remote caches
            host, port = torch_redis.rsplit("/", 1)[-1].split(":")
            env.update({"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
                        "TORCHINDUCTOR_REDIS_HOST": host, "TORCHINDUCTOR_REDIS_PORT": port})
        return env

    def one(tag, env):
        out = os.path.join(work, "out.pt")
        done = subprocess.run([python, NODE, out], env=env, capture_output=True, text=True, timeout=3600)
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                r = json.loads(line[len("RESULT "):])
                r["lowered"] = r["inductor"].get("fxgraph_cache_miss", 0) + r["inductor"].get("fxgraph_cache_bypass", 0)
                r["compiles"] = r["kiln"]["kiln"] - r["kiln"]["hits"] if "kiln" in r else r["cxx_commands"]
                log(f"compare: torch-compile: {tag}: ready {r['ready_s']:.1f} s, first call {r['first_call_s']:.1f} s (lowering {r['lowering_s']:.1f} s, "
                    f"C++ {r['cxx_s']:.1f} s), {r['lowered']} graphs lowered, {r['compiles']} C++ compiles")
                return r
        raise RuntimeError(f"{tag}: no result\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")

    def ms(results):
        return stats_ms([r["ready_s"] * 1000 for r in results])

    how = (f"tests/python/compile_cache_node.py under torch {torch_version}: a fresh process from its start to the end of its "
           "first compiled call (imports, compile, loads)")
    proc, port = start_redis(work)
    if not proc:
        add("torch-compile", "torch.compile through kiln", None, "", missing="redis-server is not installed (scripts/setup)")
        return
    try:
        kiln_redis = f"redis://127.0.0.1:{port}"
        torch_redis = f"redis://127.0.0.1:{port}"  # torch's entries live under pt2:* keys: no clash with kiln's
        for model in MODELS:
            label = LABEL[model]
            # Node 1 of each kind fills the tiers (and torch's node its warm folder, for the floor).
            shutil.rmtree(torch_pch, ignore_errors=True)
            warm_torch = fresh(f"{model}-torch-node1")
            torch_cold = one(f"{model}: torch cold on node 1", env_for(model, False, fresh("unused"), warm_torch, torch_redis=torch_redis))
            kiln_cold = one(f"{model}: kiln cold on node 1", env_for(model, True, fresh(f"{model}-kiln-node1"), fresh(f"{model}-kiln-i1"),
                                                                     redis=kiln_redis))
            floor, ours, theirs = [], [], []
            for i in range(reps):
                floor.append(one(f"{model}: floor {i + 1}", env_for(model, False, fresh("unused"), warm_torch)))
                ours.append(one(f"{model}: kiln new node {i + 1}", env_for(model, True, fresh(f"{model}-kiln-n{i}"),
                                                                            fresh(f"{model}-kiln-ni{i}"), redis=kiln_redis)))
                shutil.rmtree(torch_pch, ignore_errors=True)  # a new node has no .gch of torch's
                theirs.append(one(f"{model}: torch new node, torch's Redis {i + 1}",
                                  env_for(model, False, fresh("unused"), fresh(f"{model}-torch-n{i}"), torch_redis=torch_redis)))
            row = add("torch-compile", f"{label}: a new node's first call: kiln (empty store and folder, the cluster's Redis; "
                      f"lowered {max(r['lowered'] for r in ours)}, compiled {max(r['compiles'] for r in ours)}) next to the floor "
                      "(torch, same node, its caches warm)", ms(ours), how + "; kiln.torch.compile_cache", ms(floor), how + "; torch as shipped")
            goal(row, "within 1.3x of the floor", row.get("ratio", 0) >= 1 / 1.3)
            row = add("torch-compile", f"{label}: a new node's first call: kiln next to torch's new node with torch's own Redis caches "
                      f"(it lowered {max(r['lowered'] for r in theirs)}, built {max(r['compiles'] for r in theirs)} kernels with g++)",
                      ms(ours), how + "; kiln.torch.compile_cache", ms(theirs), how + "; TORCHINDUCTOR_{FX_GRAPH,AUTOGRAD}_REMOTE_CACHE=1")
            goal(row, ">= 3x faster than torch's new node", row.get("ratio", 0) >= 3)
            row = add("torch-compile", f"{label}: cold on node 1 (nothing stored anywhere): first call, one run each",
                      ms([kiln_cold]), how + "; kiln, empty store", ms([torch_cold]), how + "; torch as shipped, no .gch",
                      note=f"lowering kiln {kiln_cold['lowering_s']:.1f} s / torch {torch_cold['lowering_s']:.1f} s; C++ kiln "
                           f"{kiln_cold['cxx_s']:.1f} s / torch {torch_cold['cxx_s']:.1f} s")
            goal(row, "kiln never slower", row.get("ratio", 0) >= 1)

        # N ranks of one node starting at once, the transformer: one lowering per graph with kiln.
        ranks = 4
        walls, totals = {}, {}
        for side in ("torch", "kiln"):
            store = fresh(f"ranks-{side}-store")
            # An empty tier for each side: its ranks find nothing made before.
            subprocess.run(["redis-cli", "-p", str(port), "flushall"], capture_output=True)
            procs = []
            start = time.perf_counter()
            for r in range(ranks):
                env = env_for("transformer", side == "kiln", store, fresh(f"ranks-{side}-{r}"),
                              redis=kiln_redis if side == "kiln" else None, torch_redis=torch_redis if side == "torch" else None)
                procs.append(subprocess.Popen([python, NODE, os.path.join(work, f"rank{r}.pt")], env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            results = []
            for p in procs:
                out, _ = p.communicate(timeout=3600)
                r = json.loads(next(l[7:] for l in out.splitlines() if l.startswith("RESULT ")))
                r["lowered"] = r["inductor"].get("fxgraph_cache_miss", 0)
                r["compiles"] = r["kiln"]["kiln"] - r["kiln"]["hits"] if "kiln" in r else r["cxx_commands"]
                results.append(r)
            walls[side] = time.perf_counter() - start
            totals[side] = (sum(r["lowered"] for r in results), sum(r["compiles"] for r in results))
            log(f"compare: torch-compile: {ranks} ranks, {side}: {totals[side][0]} lowerings, {totals[side][1]} C++ compiles, "
                f"wall {walls[side]:.1f} s")
        row = add("torch-compile", f"{ranks} ranks of one node at once, transformer, own Inductor folders: lowerings and C++ compiles in "
                  f"all, kiln {totals['kiln'][0]} and {totals['kiln'][1]}, torch with its Redis {totals['torch'][0]} and "
                  f"{totals['torch'][1]}; wall, one run", stats_ms([walls["kiln"] * 1000]), how + f"; {ranks} processes, one kiln store",
                  stats_ms([walls["torch"] * 1000]), how + f"; {ranks} processes, torch's Redis caches on")
        goal(row, "one lowering per graph", totals["kiln"][0] == 1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
