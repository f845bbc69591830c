#!/usr/bin/env python3
"""kiln's CPU ops next to PyTorch's and DeepSpeed's own, in one process, on the same tensors.

usage: op_peers.py --json OUT [--quick] [--torch-extensions DIR]

Run by `tools/bench/compare --only runtime` under the venv's Python (torch 2.x, DeepSpeed),
with kiln's Python package on PYTHONPATH. For each case every side runs once per round, in an
order that turns each round, so that the drift of a shared machine's memory bandwidth falls on
all sides alike; each sample is the second of two calls in a row (each side timed from the state
its own call leaves), timed with time.perf_counter, kiln's launch synchronous (as a torch op is). Threads: torch.set_num_threads(cores); DeepSpeed's OpenMP
takes every core; kiln's CPU backend runs a launch's blocks on one worker per core.

The peers, at the shapes of kiln_runtime_bench's BM_OpThroughput:
  adamw (1 Mi, 16 Mi and 256 Mi fp32 parameters): DeepSpeed's cpu_adam (built by its CPUAdamBuilder:
    torch's cpp_extension, -O3 -march=native -fopenmp), adam_update on the same four tensors as
    kiln; torch.optim.AdamW for-loop, foreach and fused at 16 Mi, the fastest of them at 256 Mi,
    fused at 1 Mi.
  softmax_online / row_softmax (16384 x 4096): aten::_softmax.out (torch.softmax's kernel
    without its 256 MiB allocation).
  layer_norm (16384 x 4096, gamma and beta): aten::native_layer_norm.out (F.layer_norm's).
  gelu, gelu_bf16 (64 Mi elements): torch._C._nn.gelu(approximate="tanh", out=) (F.gelu's).
Bytes are counted as kiln_runtime_bench counts them (every byte an element must move).
Before timing, each kiln op's result is compared with its peer's on the same inputs.
"""
import argparse
import json
import os
import statistics
import sys
import time


# compare's harness, beside this script (tools/bench/kiln_compare): the same paired ratio as its
# interleaved rows.
from kiln_compare.harness import paired_ratio  # noqa: E402


def log(msg):
    print("op_peers: " + msg, file=sys.stderr, flush=True)


def mem_available_bytes():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class Case:
    def __init__(self, name, bytes_moved, shape):
        self.name, self.bytes, self.shape = name, bytes_moved, shape
        self.sides = {}  # side -> (how, fn)
        self.checks = {}

    def side(self, name, how, fn):
        self.sides[name] = (how, fn)


def measure(case, rounds, min_seconds):
    """Every side once per round, the order turned each round; at least `rounds` rounds and
    `min_seconds` in all."""
    for _, fn in case.sides.values():  # warm: pages touched, code built, threads started
        fn()
    names = list(case.sides)
    samples = {n: [] for n in names}
    started, r = time.monotonic(), 0
    while r < rounds or time.monotonic() - started < min_seconds:
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            fn = case.sides[name][1]
            # Each sample is the second of two calls in a row: every side is timed from the
            # state its own call leaves (its threads awake, its data where it put it). Timed
            # from whatever the previous side left, AdamW's sides moved by up to 25% with the
            # order here (DeepSpeed's 10-16 ms by which side ran before it); timed so, kiln's
            # over DeepSpeed's stayed within 0.95-1.09 (quartiles).
            fn()
            t = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t)
            # torch's and DeepSpeed's OpenMP threads spin after their work (libgomp's default of
            # 300,000 spins: several ms here) before they sleep; the next side must not share
            # the cores with them.
            time.sleep(0.02)
        r += 1
    out = []
    for name in names:
        s = sorted(samples[name])
        med = statistics.median(s)
        row = {"case": case.name, "shape": case.shape, "side": name, "how": case.sides[name][0], "bytes": case.bytes,
               "n": len(s), "median_ms": med * 1e3, "min_ms": s[0] * 1e3, "max_ms": s[-1] * 1e3,
               "GBps": case.bytes / med / 1e9, "GBps_min": case.bytes / s[-1] / 1e9, "GBps_max": case.bytes / s[0] / 1e9,
               "check": case.checks.get(name)}
        if name != "kiln":  # kiln's time over this side's in the same round: the drift between rounds cancels
            row["paired_ratio"] = paired_ratio(samples["kiln"], samples[name])
        out.append(row)
    return out


def agreement(a, b, rtol, atol):
    """How far a is from b: the largest difference, and whether torch.allclose(a, b, rtol, atol)."""
    import torch
    return f"max abs difference {float((a.double() - b.double()).abs().max()):.2e}, allclose(rtol={rtol:g}, atol={atol:g}) " \
           f"{torch.allclose(a, b, rtol=rtol, atol=atol)}"


# ---- AdamW

LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01


def deepspeed_cpu_adam():
    try:
        from deepspeed.ops.op_builder import CPUAdamBuilder
        t = time.monotonic()
        module = CPUAdamBuilder().load()
        log(f"DeepSpeed's cpu_adam loaded in {time.monotonic() - t:.1f} s")
        module.create_adam(0, LR, BETAS[0], BETAS[1], EPS, WD, True, False)
        return module, None
    except Exception as e:  # a peer missing here is a row that says why
        return None, f"{type(e).__name__}: {e}"[:300]


def adamw_tensors(n, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(n, generator=g)
    grad = torch.randn(n, generator=g)
    m = torch.randn(n, generator=g) * 0.1
    v = torch.rand(n, generator=g) * 0.01
    return p, grad, m, v


def torch_adamw(p, grad, mode):
    """torch.optim.AdamW over p (storage shared) with grad, its state set from nothing."""
    import torch
    param = torch.nn.Parameter(p)
    param.grad = grad
    kw = {"foreach": False} if mode == "for-loop" else {"foreach": True} if mode == "foreach" else {"fused": True}
    return torch.optim.AdamW([param], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, **kw), param


def adamw_check(kiln_adamw, ds, torch_mode):
    """One step from the same state: kiln and DeepSpeed against torch.optim.AdamW."""
    import torch
    n = 1 << 20
    p0, grad, m0, v0 = adamw_tensors(n, seed=1)
    opt, param = torch_adamw(p0.clone(), grad, torch_mode)
    opt.step()  # torch's state starts at zero: give every side zero moments, step 1
    ref = param.detach()
    p, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
    kiln_adamw(p, grad, m, v, LR, BETAS[0], BETAS[1], EPS, WD, 1, n, grid=(n + 4095) // 4096, block=4096)
    checks = {"kiln": f"one step against torch.optim.AdamW ({torch_mode}): {agreement(p, ref, 1e-5, 1e-6)}"}
    if ds:
        p, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
        ds.create_adam(1, LR, BETAS[0], BETAS[1], EPS, WD, True, False)
        ds.adam_update(1, 1, LR, BETAS[0], BETAS[1], EPS, WD, True, p, grad, m, v)
        checks["deepspeed"] = f"one step against torch.optim.AdamW ({torch_mode}): {agreement(p, ref, 1e-5, 1e-6)}"
    return checks


def adamw_case(kiln, n, label, ds, ds_missing, torch_modes):
    op = kiln.op("adamw")
    case = Case("adamw", n * 28.0, label)
    p, grad, m, v = adamw_tensors(n)
    step = [0]

    def kiln_step():
        step[0] += 1
        op(p, grad, m, v, LR, BETAS[0], BETAS[1], EPS, WD, step[0], n, grid=(n + 4095) // 4096, block=4096)
    case.side("kiln", "kiln.op('adamw')(p, g, m, v, ..., grid=cdiv(n, 4096), block=4096)", kiln_step)
    if ds:
        ds_step = [0]

        def deepspeed_step():
            ds_step[0] += 1
            ds.adam_update(0, ds_step[0], LR, BETAS[0], BETAS[1], EPS, WD, True, p, grad, m, v)
        case.side("deepspeed", "DeepSpeed cpu_adam.adam_update (Adam_Optimizer::Step_AVX, -O3 -march=native -fopenmp, "
                  "-D__AVX512__) on the same tensors", deepspeed_step)
    opts = []
    for mode in torch_modes:
        opt, param = torch_adamw(p, grad, mode)
        opts.append((opt, param))
        case.side(f"torch AdamW {mode}", f"torch.optim.AdamW([p], {'foreach=False' if mode == 'for-loop' else 'foreach=True' if mode == 'foreach' else 'fused=True'}).step()",
                  opt.step)
    case.checks = adamw_check(op, ds, torch_modes[0]) if n == 1 << 24 else {}
    if not ds:
        case.checks["deepspeed"] = ds_missing
    return case, (p, grad, m, v, opts)


# ---- the row ops and GELU

def softmax_case(kiln, op_name, rows, cols):
    import torch
    x = torch.randn(rows, cols)
    y, ty = torch.empty_like(x), torch.empty_like(x)
    op = kiln.op(op_name)
    case = Case(op_name, rows * cols * 8.0, f"{rows}x{cols}")
    case.side("kiln", f"kiln.op('{op_name}')(x, y, rows, cols, grid=rows, block=1)", lambda: op(x, y, rows, cols, grid=rows, block=1))
    case.side("torch", "torch.ops.aten._softmax.out(x, -1, False, out=y) (torch.softmax's kernel)",
              lambda: torch.ops.aten._softmax.out(x, -1, False, out=ty))
    op(x, y, rows, cols, grid=rows, block=1)
    torch.ops.aten._softmax.out(x, -1, False, out=ty)
    case.checks["kiln"] = f"against torch.softmax: {agreement(y, ty, 1e-5, 1e-7)}"
    return case, (x, y, ty)


def layer_norm_case(kiln, rows, cols):
    import torch
    x = torch.randn(rows, cols)
    gamma, beta = torch.randn(cols), torch.randn(cols)
    y, ty = torch.empty_like(x), torch.empty_like(x)
    mean, rstd = torch.empty(rows, 1), torch.empty(rows, 1)
    op = kiln.op("layer_norm")
    case = Case("layer_norm", rows * cols * 8.0, f"{rows}x{cols}")

    def torch_ln():
        torch.ops.aten.native_layer_norm.out(x, [cols], gamma, beta, 1e-5, out0=ty, out1=mean, out2=rstd)
    case.side("kiln", "kiln.op('layer_norm')(x, gamma, beta, y, rows, cols, 1e-5, grid=rows, block=1)",
              lambda: op(x, gamma, beta, y, rows, cols, 1e-5, grid=rows, block=1))
    case.side("torch", "torch.ops.aten.native_layer_norm.out(x, [cols], gamma, beta, 1e-5, ...) (F.layer_norm's kernel)", torch_ln)
    op(x, gamma, beta, y, rows, cols, 1e-5, grid=rows, block=1)
    torch_ln()
    case.checks["kiln"] = f"against F.layer_norm: {agreement(y, ty, 1e-4, 1e-5)}"
    return case, (x, gamma, beta, y, ty, mean, rstd)


def gelu_case(kiln, op_name, n, dtype):
    import torch
    x = torch.randn(n).to(dtype)
    y, ty = torch.empty_like(x), torch.empty_like(x)
    op = kiln.op(op_name)
    case = Case(op_name, n * (8.0 if dtype == torch.float32 else 4.0), f"{n >> 20} Mi")
    case.side("kiln", f"kiln.op('{op_name}')(x, y, n, grid=cdiv(n, 4096), block=4096)",
              lambda: op(x, y, n, grid=(n + 4095) // 4096, block=4096))
    case.side("torch", "torch._C._nn.gelu(x, approximate='tanh', out=y) (F.gelu's kernel)",
              lambda: torch._C._nn.gelu(x, approximate="tanh", out=ty))
    op(x, y, n, grid=(n + 4095) // 4096, block=4096)
    torch._C._nn.gelu(x, approximate="tanh", out=ty)
    tol = (1e-5, 1e-6) if dtype == torch.float32 else (8e-3, 1e-3)  # the spec's [check] tolerances
    case.checks["kiln"] = f"against F.gelu(approximate='tanh'): {agreement(y.float(), ty.float(), *tol)}"
    return case, (x, y, ty)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", help="comma-separated cases: adamw, adamw16 (16 Mi parameters only), adamw1 (1 Mi only), "
                   "softmax, layer_norm, gelu")
    a = p.parse_args()
    import torch
    import kiln
    torch.set_num_threads(os.cpu_count())
    # Rounds, not seconds, make a median steady on a shared machine: its bandwidth moved by 2x
    # between runs seconds apart here (a threaded triad at 31 and at 14 GB/s).
    rounds, min_s = (3, 1.0) if a.quick else (25, 4.0)
    only = set(a.only.split(",")) if a.only else {"adamw", "softmax", "layer_norm", "gelu"}
    rows, notes = [], []

    def run(make, *args):
        case, keep = make(*args)
        log(f"{case.name} {case.shape}: {', '.join(case.sides)}")
        rows.extend(measure(case, rounds, min_s))
        del keep

    if only & {"adamw", "adamw16", "adamw1"}:
        ds, ds_missing = deepspeed_cpu_adam()
        if not ds:
            notes.append(f"DeepSpeed's cpu_adam could not be loaded: {ds_missing}")
    if only & {"adamw", "adamw16"}:
        run(adamw_case, kiln, 1 << 24, "16 Mi", ds, ds_missing, ["for-loop", "foreach", "fused"])
    if only & {"adamw", "adamw1"}:
        # A tensor of a model's (a 1024 x 1024 weight): a step of ~0.2 ms, where what a launch
        # costs beyond its blocks shows (docs/history/2026-12-04-cpu-adamw-openmp.md). Not
        # floored: kiln's own threads there slow the peers' OpenMP team more than kiln itself.
        run(adamw_case, kiln, 1 << 20, "1 Mi", ds, ds_missing, ["fused"])
    if "adamw" in only:
        torch16 = [r for r in rows if r["case"] == "adamw" and r["side"].startswith("torch")]
        best = min(torch16, key=lambda r: r["median_ms"])["side"].split()[-1]
        n = 1 << 28
        need = n * 4 * 8 + (1 << 30)  # kiln's four tensors, torch's two moments and a foreach temporary or two
        if mem_available_bytes() < need:
            n = 1 << 27
            notes.append(f"256 Mi parameters need ~{need / 2**30:.0f} GiB and {mem_available_bytes() / 2**30:.1f} GiB "
                         "were available: measured at 128 Mi")
        run(adamw_case, kiln, n, f"{n >> 20} Mi", ds, ds_missing, [best])
    if "softmax" in only:
        run(softmax_case, kiln, "softmax_online", 16384, 4096)
        run(softmax_case, kiln, "row_softmax", 16384, 4096)
    if "layer_norm" in only:
        run(layer_norm_case, kiln, 16384, 4096)
    if "gelu" in only:
        run(gelu_case, kiln, "gelu", 64 << 20, torch.float32)
        run(gelu_case, kiln, "gelu_bf16", 64 << 20, torch.bfloat16)
    json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows, "notes": notes},
              open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
