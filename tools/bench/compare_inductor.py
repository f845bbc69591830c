"""tools/bench/compare's torch-compile section: torch.compile on the CPU with Inductor's C++ built
by kiln (kiln.torch.inductor) next to Inductor as shipped (one g++ process per kernel module), under
the venv's torch 2.x, same model, same run.

The model is the one the issue measured: a 2-block transformer, d=256, batch 4 x 64 tokens,
inference (tests/python/inductor_models.py). Each figure is a fresh Python process; inside it
the driver times the first call (compile included) and the time spent in Inductor's compile
commands (`run_compile_cmd`, whichever compiler is behind it), and counts them.

Rows:
1. Cold on one node, the kernels not built anywhere: g++ with torch's own precompiled header
   made (its .gch, as after any earlier run on the node) next to kiln with its precompiled
   header stored (a store that built another model before). Goal: >= 2x on compile seconds.
   And both with nothing made yet (no .gch, an empty kiln store).
2. A second node: Inductor's FX-graph entries present (copied from the first node's
   TORCHINDUCTOR_CACHE_DIR, as a shared FX cache gives them) but no kernel .so; kiln with an
   empty store and the first node's artifacts in a Redis tier. Goal: no C++ compile at all,
   first call >= 2x faster than torch as shipped.
3. N ranks on one node starting at once, one kiln store: how many kernels each side compiles.
"""
import glob
import json
import os
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MODELS = os.path.join(ROOT, "tests", "python")

DRIVER = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["MODELS_DIR"])
import torch
from torch._inductor import cpp_builder
import inductor_models
if os.environ.get("USE_KILN") == "1":
    import kiln.torch.inductor
    kiln.torch.inductor.install()
inner = cpp_builder.run_compile_cmd
spent = {"s": 0.0, "n": 0, "cxx": 0}
def timed(cmd_line, cwd):
    start = time.perf_counter()
    try:
        return inner(cmd_line, cwd)
    finally:
        spent["s"] += time.perf_counter() - start
        spent["n"] += 1
cpp_builder.run_compile_cmd = timed
d = int(os.environ.get("MODEL_D", "256"))
first = inductor_models.first_call_seconds(d=d, blocks=int(os.environ.get("MODEL_BLOCKS", "2")))
out = {"first_call_s": first, "compile_s": spent["s"], "commands": spent["n"]}
if os.environ.get("USE_KILN") == "1":
    out["kiln"] = kiln.torch.inductor.stats()
    out["compiles"] = out["kiln"]["kiln"] - out["kiln"]["hits"]
    out["gxx"] = out["kiln"]["passed_on"]
else:
    out["compiles"] = out["gxx"] = spent["n"]
print("RESULT " + json.dumps(out))
"""


def run_section(a, work, add, stats_ms, goal, log, child_env, python, build_python, start_redis):
    driver = os.path.join(work, "inductor_driver.py")
    with open(driver, "w") as f:
        f.write(DRIVER)
    probe = subprocess.run([python, "-c", "import torch; assert int(torch.__version__.split('.')[0]) >= 2; print(torch.__version__)"],
                           capture_output=True, text=True, env=child_env())
    if probe.returncode != 0:
        add("torch-compile", "torch.compile through kiln", None, "", missing="torch 2.x is not installed in " + python)
        return
    torch_version = probe.stdout.strip()
    torch_pch = os.path.join("/tmp", "torchinductor_" + os.environ.get("USER", "root"), "precompiled_headers")

    def one(tag, use_kiln, kiln_dir, inductor_dir, **extra):
        env = child_env()
        env.update({"MODELS_DIR": MODELS, "USE_KILN": "1" if use_kiln else "0", "KILN_CACHE_DIR": kiln_dir,
                    "TORCHINDUCTOR_CACHE_DIR": inductor_dir, "PYTHONPATH": build_python, "KILN_REMOTE_CACHE": ""})
        env.update({k: str(v) for k, v in extra.items()})
        done = subprocess.run([python, driver], env=env, capture_output=True, text=True, timeout=1800)
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                r = json.loads(line[len("RESULT "):])
                log(f"compare: torch-compile: {tag}: first call {r['first_call_s']:.1f} s, compile {r['compile_s']:.1f} s, "
                    f"{r['compiles']} compiles, {r['gxx']} g++ runs")
                return r
        raise RuntimeError(f"{tag}: no result\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")

    def fresh(name):
        path = os.path.join(work, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    reps = 2 if a.quick else 3
    how_kiln = (f"python driver (torch {torch_version}, kiln.torch.inductor.install()), first call of the 2-block d=256 transformer; "
                "compile seconds = time inside Inductor's run_compile_cmd")
    how_gxx = f"the same driver without kiln: Inductor as shipped (g++ -O3 -march=native -fopenmp per kernel module)"

    # 1. Cold, the precompiled headers made: torch's .gch by an untimed run, kiln's stored by a
    #    run of another model (d=128) in a store that is copied fresh for each run.
    one("g++ warm-up (makes torch's .gch)", False, fresh("unused"), fresh("gxx-warmup"), MODEL_D=128)
    pch_store = fresh("kiln-pch")
    one("kiln warm-up (stores kiln's PCH)", True, pch_store, fresh("kiln-warmup"), MODEL_D=128)
    gxx, ours = [], []
    for i in range(reps):
        gxx.append(one(f"g++ cold {i + 1}", False, fresh("unused"), fresh(f"gxx-cold{i}")))
        store = fresh(f"kiln-cold{i}-store")
        shutil.copytree(pch_store, store)
        ours.append(one(f"kiln cold {i + 1}", True, store, fresh(f"kiln-cold{i}")))
    row = add("torch-compile", f"cold on one node, precompiled headers made: compile seconds ({ours[0]['compiles']} kernels built "
              f"by kiln; g++ ran {gxx[0]['gxx']} times)", stats_ms([r["compile_s"] * 1000 for r in ours]), how_kiln + "; kiln's store "
              "holds its PCH (from a d=128 model)", stats_ms([r["compile_s"] * 1000 for r in gxx]), how_gxx + "; torch's .gch made",
              note=f"first call: kiln {stats_ms([r['first_call_s'] * 1000 for r in ours])['median_ms'] / 1000:.1f} s, "
                   f"g++ {stats_ms([r['first_call_s'] * 1000 for r in gxx])['median_ms'] / 1000:.1f} s")
    goal(row, ">= 2x on the compile seconds", row.get("ratio", 0) >= 2)

    # 1b. Nothing made yet: no .gch, an empty kiln store (one run each: the .gch is per machine).
    shutil.rmtree(torch_pch, ignore_errors=True)
    g0 = one("g++ cold, no .gch", False, fresh("unused"), fresh("gxx-nothing"))
    k0 = one("kiln cold, empty store", True, fresh("kiln-nothing-store"), fresh("kiln-nothing"))
    add("torch-compile", "cold on one node, nothing made yet (no .gch, an empty kiln store): compile seconds, one run each",
        stats_ms([k0["compile_s"] * 1000]), how_kiln + "; empty store", stats_ms([g0["compile_s"] * 1000]), how_gxx + "; no .gch")

    # 2. A second node: the FX-graph entries of node 1, no kernel .so; kiln's artifacts in Redis.
    proc, port = start_redis(work)
    if not proc:
        add("torch-compile", "second node", None, "", missing="redis-server is not installed (scripts/setup)")
        return
    try:
        url = f"redis://127.0.0.1:{port}"
        node1_gxx, node1_kiln = fresh("node1-gxx"), fresh("node1-kiln")
        one("node 1, g++", False, fresh("unused"), node1_gxx, TORCHINDUCTOR_FX_GRAPH_CACHE=1)
        one("node 1, kiln (publishes to Redis)", True, fresh("node1-kiln-store"), node1_kiln, KILN_REMOTE_CACHE=url,
            TORCHINDUCTOR_FX_GRAPH_CACHE=1)

        def fx_only(src, name):
            dst = fresh(name)
            os.makedirs(dst)
            for sub in ("fxgraph", "aotautograd"):
                if os.path.isdir(os.path.join(src, sub)):
                    shutil.copytree(os.path.join(src, sub), os.path.join(dst, sub))
            return dst

        gxx2, ours2 = [], []
        for i in range(reps):
            gxx2.append(one(f"node 2, g++ {i + 1}", False, fresh("unused"), fx_only(node1_gxx, f"node2-gxx{i}"),
                            TORCHINDUCTOR_FX_GRAPH_CACHE=1))
            ours2.append(one(f"node 2, kiln {i + 1}", True, fresh(f"node2-kiln{i}-store"), fx_only(node1_kiln, f"node2-kiln{i}"),
                             KILN_REMOTE_CACHE=url, TORCHINDUCTOR_FX_GRAPH_CACHE=1))
        row = add("torch-compile", f"second node: FX-graph entries present, no kernel .so (kiln: empty store, Redis tier): first call; "
                  f"kiln compiled {max(r['compiles'] for r in ours2)} kernels, g++ ran {gxx2[0]['gxx']} times",
                  stats_ms([r["first_call_s"] * 1000 for r in ours2]), how_kiln + "; KILN_REMOTE_CACHE=redis://...",
                  stats_ms([r["first_call_s"] * 1000 for r in gxx2]), how_gxx)
        goal(row, "no C++ compile and >= 2x on the first call",
             row.get("ratio", 0) >= 2 and all(r["compiles"] == 0 for r in ours2))
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    # 3. N ranks on one node at once.
    ranks = 4
    for side in ("g++", "kiln"):
        store = fresh(f"ranks-{side}-store")
        inductor = fresh(f"ranks-{side}")
        env = child_env()
        env.update({"MODELS_DIR": MODELS, "USE_KILN": "1" if side == "kiln" else "0", "KILN_CACHE_DIR": store,
                    "PYTHONPATH": build_python, "KILN_REMOTE_CACHE": ""})
        start = time.perf_counter()
        procs = []
        for r in range(ranks):
            # Each rank a folder of its own, as ranks in their own containers have.
            procs.append(subprocess.Popen([python, driver], env=dict(env, TORCHINDUCTOR_CACHE_DIR=os.path.join(inductor, str(r))),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = []
        for p in procs:
            out, err = p.communicate(timeout=3600)
            results.append(next(json.loads(l[7:]) for l in out.splitlines() if l.startswith("RESULT ")))
        wall = time.perf_counter() - start
        compiles = sum(r["compiles"] for r in results)
        log(f"compare: torch-compile: {ranks} ranks, {side}: {compiles} compiles in all, wall {wall:.1f} s")
        if side == "g++":
            gxx_ranks = (compiles, wall, results[0]["compiles"])
        else:
            row = add("torch-compile", f"{ranks} ranks on one node at once (own Inductor folders; kiln: one store): compiles in all, "
                      f"kiln {compiles} for {results[0]['kiln']['kiln']} kernels, g++ {gxx_ranks[0]} for {gxx_ranks[2]}; wall, one run",
                      stats_ms([wall * 1000]), how_kiln + f"; {ranks} processes, one KILN_CACHE_DIR",
                      stats_ms([gxx_ranks[1] * 1000]), how_gxx + f"; {ranks} processes")
            goal(row, "one compile per kernel", compiles == results[0]["kiln"]["kiln"])
