#!/usr/bin/env python3
"""Where a first torch.compile'd call's time goes, by phase, on four kinds of node: torch cold (an
empty Inductor folder, no .gch), torch's floor (the same node again, its caches warm), kiln cold
(empty store, an empty Redis tier) and kiln's new node (empty store and folder, that Redis now
filled). One run each, in that order, each a fresh process (tests/python/compile_cache_node.py).

    tools/bench/torch_compile_phases.py [--model transformer|llama] [--python VENV_PYTHON]

The phases come from torch's own timers (`dynamo_timed`, summed per name) and the node's timing of
every C++ build:
- Dynamo's trace and guards: `_compile.compile_inner` less the backend (`call_user_compiler`);
- torch's cache keys: hashing Triton's and torch's sources (`triton_key`, `torch_key`);
- C++ builds: the wall time during which at least one build ran (Inductor's kernels and probes
  through `cpp_builder.run_compile_cmd`);
- AOTAutograd, Inductor's lowering and code generation, loading: the rest of the backend;
- the call itself and the rest: the first call less Dynamo's compile.
Prints a Markdown table of seconds and shares of the first call. Like with like: torch's runs use
tools/bench/torch-lib-first/g++ as compare's torch-compile section does."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kiln_compare.servers import start_redis  # noqa: E402
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
NODE = os.path.join(ROOT, "tests", "python", "compile_cache_node.py")
MODELS = {"transformer": {"MODELS": "transformer", "MODEL_D": "256"}, "llama": {"MODELS": "llama", "HF_HIDDEN": "256"}}


def phases(r):
    """The first call's seconds by phase (see the module's docstring)."""
    p = r.get("phases", {})
    backend = p.get("OutputGraph.call_user_compiler", 0.0)
    keys = p.get("CacheBase.get_system.triton_key", 0.0) + p.get("inductor_codecache_torch_key", 0.0)
    dynamo = p.get("_compile.compile_inner", 0.0) - backend
    cxx = r.get("cxx_wall_s", 0.0)
    return {"Dynamo's trace and guards": dynamo, "torch's cache keys (hashes of Triton's and torch's sources)": keys,
            "C++ builds (wall, any running)": cxx,
            "AOTAutograd, Inductor's lowering and code generation, loading": max(0.0, backend - keys - cxx),
            "the call itself and the rest": max(0.0, r["first_call_s"] - p.get("_compile.compile_inner", 0.0))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="transformer", choices=sorted(MODELS))
    ap.add_argument("--python", default=os.path.expanduser("~/.local/share/kiln-dev/venv/bin/python"))
    a = ap.parse_args()
    torch_lib = subprocess.run([a.python, "-c", "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"],
                               capture_output=True, text=True, check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="kiln-phases-")
    redis, port = start_redis(work)
    if not redis:
        sys.exit("torch_compile_phases: redis-server is not installed or did not start (scripts/setup)")
    try:
        # torch's .gch of its header, which a cold node does not have
        shutil.rmtree(os.path.join(tempfile.gettempdir(), "torchinductor_" + os.environ.get("USER", "root"), "precompiled_headers"),
                      ignore_errors=True)
        torch_side = {"KILN": "0", "CXX": os.path.join(HERE, "torch-lib-first", "g++"), "KILN_BENCH_TORCH_LIB": torch_lib,
                      "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, "torch-node")}
        runs = [("torch cold", dict(torch_side)), ("torch's floor", dict(torch_side)),
                ("kiln cold", {"KILN": "1", "KILN_CACHE_DIR": os.path.join(work, "kiln-1"), "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, "i1"),
                               "KILN_REMOTE_CACHE": f"redis://127.0.0.1:{port}"}),
                ("kiln new node", {"KILN": "1", "KILN_CACHE_DIR": os.path.join(work, "kiln-2"), "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, "i2"),
                                   "KILN_REMOTE_CACHE": f"redis://127.0.0.1:{port}"})]
        results = []
        for name, extra in runs:
            env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"), **MODELS[a.model], **extra)
            env.setdefault("KILN_CACHE_DIR", os.path.join(work, "unused"))
            done = subprocess.run([a.python, NODE, os.path.join(work, "out.pt")], env=env, capture_output=True, text=True, timeout=3600)
            line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"torch_compile_phases: {name}: no result\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
            r = json.loads(line[len("RESULT "):])
            results.append((name, r))
            print(f"torch_compile_phases: {name}: first call {r['first_call_s']:.2f} s", file=sys.stderr)
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    names = list(phases(results[0][1]))
    print(f"| {a.model}, first call: phase | " + " | ".join(n for n, _ in results) + " |")
    print("|---|" + "---|" * len(results))
    for phase in names:
        cells = [f"{phases(r)[phase]:.2f} s ({100 * phases(r)[phase] / r['first_call_s']:.0f}%)" for _, r in results]
        print(f"| {phase} | " + " | ".join(cells) + " |")
    print("| **first call** | " + " | ".join(f"**{r['first_call_s']:.2f} s**" for _, r in results) + " |")
    print("| imports before it (torch, kiln's install) | " + " | ".join(f"{r['import_s']:.2f} s" for _, r in results) + " |")


if __name__ == "__main__":
    main()
