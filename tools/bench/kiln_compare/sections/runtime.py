"""op throughput next to a threaded STREAM triad and copy; kiln's ops next to
torch's (softmax, layer_norm, gelu, optim.AdamW) and DeepSpeed's CPU Adam in one
process on the same tensors (tools/bench/op_peers.py); CPU launch overhead, graphs
"""
import json
import os
import subprocess
import time

from ..harness import add, BUILD, child_env, Floor, gbench, goal, ROOT, rows, run, section_took, VENV_PYTHON


OP_PEERS = os.path.join(ROOT, "tools", "bench", "op_peers.py")

FLOORED = True  # compare --check: this section must measure its floored row

# CPU AdamW over 16 Mi fp32 parameters next to DeepSpeed's cpu_adam, on kiln's time over its in
# the same round (op_peers.py pairs them, each side timed on its second call in a row). The goal
# is at least DeepSpeed's. The floor trips when kiln takes 1.15x its time: the runs it was set
# from were at 0.96-1.01 on Intel and 0.81-1.02 on AMD EPYC (whose AVX-512 runs on 256-bit
# units); issue 47's 1.05-1.18 there was timed on the first call after another side.
ADAMW_FLOOR = Floor(min_ratio=1 / 1.15, source=(
    "tools/bench/compare --ci, 2 cores, quiet, 2026-12-04: kiln's time over DeepSpeed's in the same round 0.96-1.01 in "
    "3 runs on an Intel Xeon VM, 0.81-1.02 in 5 runs on an AMD EPYC VM; docs/history/2026-12-04-9945305-compare-ci-floors.md"))


def section(a, work):
    """Op throughput next to a threaded STREAM triad (kiln_runtime_bench), then kiln's ops next
    to torch's and DeepSpeed's in one process (op_peers.py under the venv); launch overhead."""
    if getattr(a, "ci", False):  # --ci: only the floored rows, CPU AdamW at 16 Mi next to DeepSpeed's
        op_peer_rows(a, work, only="adamw16")
        return
    started, load_before = time.monotonic(), os.getloadavg()
    head = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
    dirty = run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--", "specs"], check=False).stdout.strip()
    rows.append({"section": "runtime", "what": "kiln measured",
                 "note": f"the build in {BUILD}, the specs of commit {head}" + (" with uncommitted changes" if dirty else "")})
    r = gbench("kiln_runtime_bench", "BM_OpThroughput|BM_CpuLaunchEmpty|BM_Cpu100Launches|BM_CpuGraphOf100Launches|BM_EventRecordQuery|BM_VectorAdd", a.reps)
    for name, e in sorted(r.items()):
        if name.startswith("BM_OpThroughput/"):
            c, sd = e["counters"], e.get("counters_sd", {})
            op = name.split("/")[1]
            row = {"section": "runtime", "what": f"{op} throughput on the CPU (one worker per core)",
                   "throughput_GBps": c.get("op_GBps"), "throughput_sd": sd.get("op_GBps"), "triad_GBps": c.get("triad_GBps"),
                   "triad_sd": sd.get("triad_GBps"), "copy_GBps": c.get("copy_GBps"), "fraction": c.get("fraction"),
                   "fraction_sd": sd.get("fraction"), "n": e["n"],
                   "note": "bytes each element must move, in kiln_runtime_bench's k_ops; medians of the repetitions (sd)"}
            rows.append(goal(row, ">= 80% of the triad", (c.get("fraction") or 0) >= 0.8))
        elif name.startswith("BM_VectorAdd"):
            c = e["counters"]
            rows.append({"section": "runtime", "what": "vector_add over three 256 MiB arrays", "throughput_GBps": c.get("kiln_GBps"),
                         "triad_GBps": max(c.get("stream_add_GBps", 0), c.get("memcpy_GBps", 0)), "fraction": c.get("fraction"),
                         "note": "peer: the better of a threaded STREAM add and memcpy"})
        else:
            what = {"BM_CpuLaunchEmpty": "an empty kernel launched, queued (per launch; 1,000 then synchronize)",
                    "BM_Cpu100Launches": "100 empty launches, then synchronize",
                    "BM_CpuGraphOf100Launches": "the same 100 launches captured once, replayed as a graph",
                    "BM_EventRecordQuery": "event record + query on an idle stream"}.get(name, name)
            per = 1000.0 if name == "BM_CpuLaunchEmpty" else 1.0
            rows.append({"section": "runtime", "what": what, "kiln": {"median_ms": e["median_ms"] / per,
                         "sd_ms": (e.get("stddev_ms") or 0) / per, "n": e["n"], "how": "kiln_runtime_bench " + name}})
    op_peer_rows(a, work)
    section_took("runtime", started, load_before)


def op_peer_rows(a, work, only=None):
    """kiln's ops next to torch's and DeepSpeed's, from op_peers.py under the venv's torch."""
    if not os.access(VENV_PYTHON, os.X_OK):
        add("runtime", "ops next to torch and DeepSpeed", None, "", missing=f"{VENV_PYTHON} is not here (scripts/setup)")
        return
    out = os.path.join(work, "op_peers.json")
    env = child_env()
    env["PYTHONPATH"] = os.path.join(BUILD, "python")
    env["KILN_CACHE_DIR"] = os.path.join(work, "kiln-cache")
    # DeepSpeed's cpu_adam is built once (about 80 s here) and kept beside the build for later runs.
    env["TORCH_EXTENSIONS_DIR"] = os.path.join(BUILD, "bench", "torch_extensions")
    cmd = [VENV_PYTHON, OP_PEERS, "--json", out] + (["--quick"] if a.quick else []) + (["--only", only] if only else [])
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        add("runtime", "ops next to torch and DeepSpeed", None, "", missing=f"op_peers.py failed ({r.returncode}): {r.stderr[-1500:]}")
        return
    data = json.load(open(out))
    for note in data["notes"]:
        rows.append({"section": "runtime", "what": "ops next to torch and DeepSpeed", "note": note})
    by_case = {}
    for x in data["rows"]:
        by_case.setdefault((x["case"], x["shape"]), []).append(x)
    stats = lambda x: {"median_ms": x["median_ms"], "min_ms": x["min_ms"], "max_ms": x["max_ms"], "n": x["n"]}
    gbps = lambda x: f"{x['GBps']:.1f} GB/s ({x['GBps_min']:.1f}..{x['GBps_max']:.1f})"
    for (case, shape), sides in by_case.items():
        kiln = next(x for x in sides if x["side"] == "kiln")
        for peer in sides:
            if peer is kiln:
                continue
            row = add("runtime", f"{case} {shape}, one process: kiln {gbps(kiln)} vs {peer['side']} {gbps(peer)}", stats(kiln),
                      f"{kiln['how']} [{data['torch']}, {data['threads']} threads]", stats(peer), peer["how"],
                      note="; ".join(c for c in (kiln.get("check"), peer.get("check")) if c))
            pr = peer.get("paired_ratio")
            if pr:
                row["note"] += f"; kiln's time over the peer's in the same round: median {pr['median']:.2f} (quartiles {pr['q1']:.2f}..{pr['q3']:.2f})"
            row.update({"kiln_GBps": kiln["GBps"], "peer_GBps": peer["GBps"], "case": case, "shape": shape, "peer_side": peer["side"],
                        "paired_ratio": pr})
            text = "at least DeepSpeed's CPU Adam" if peer["side"] == "deepspeed" else f"no slower than {peer['side']}"
            floored = peer["side"] == "deepspeed" and shape == "16 Mi"
            goal(row, text, kiln["median_ms"] <= peer["median_ms"], floor=ADAMW_FLOOR if floored else None)
    adamw16 = by_case.get(("adamw", "16 Mi"), [])
    if only in (None, "adamw", "adamw16") and not any(x["side"] == "deepspeed" for x in adamw16):
        # DeepSpeed did not run: the floored row, with no figure, says why (compare --check fails).
        why = next((n for n in data["notes"] if "DeepSpeed" in n), None) or "op_peers.py measured no DeepSpeed side"
        ADAMW_FLOOR.on(add("runtime", "adamw 16 Mi, one process: kiln vs deepspeed", None, "", missing=f"DeepSpeed's cpu_adam did not run: {why}"))
