"""kiln's bandwidth-bound CUDA ops against torch's own, over sizes from 4 KiB to 1 GiB per
tensor, with the device's copy bandwidth at each size: the whole curve from one device call
(tools/gpu-check and tools/gpu-wheel-check run it; docs/CUDA-OPS.md says what to look for).

For each op and size it prints the time per call (median of --reps batches, each batch timed by
CUDA events around enough back-to-back calls to take about a millisecond, so small sizes measure
what a launch costs from Python), GB/s (the bytes the op must move / that time) with the spread
of the batches, torch's GB/s for the same work (its own op where it has one; a composite where it
does not, marked), torch's copy_ of a tensor of that size (the roof), kiln's fraction of the copy
and of torch, and the largest difference from torch's result (ulps too, for gelu).

kiln's ops are launched as their specs say (no grid: the [cuda] launch sized to the device);
--legacy adds a row per op launched a thread per element (grid = cdiv(n, 256)), as callers did
before. --plan prints the sizes and bytes without a GPU; --on-cpu runs every case on kiln's CPU
accelerator and torch's CPU ops, timed by the wall clock (small sizes: it checks the script and
the cases where there is no GPU, and its figures are not the GPU's). Where there is no GPU, no
torch or no kiln the script says so and exits 0.

    python3 tools/bench/gpu_sweep.py [--ops vector_add,gelu] [--min 4K] [--max 1G] [--factor 4]
        [--cols 1024] [--chunk 4096] [--group 128] [--reps 7] [--legacy] [--json FILE] [--plan] [--on-cpu]
"""
import argparse
import json
import math
import statistics
import sys
import time

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text):
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in UNITS else ""
    number = t[:-1] if unit else t
    try:
        value = int(float(number) * UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (write 4K, 16M, 1G)")
    if value < 16:
        raise argparse.ArgumentTypeError(f"'{text}' is under 16 bytes")
    return value


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


# Each op: the size of its main tensor's element (what "bytes per tensor" counts), the bytes one
# call moves for n such elements, and what torch offers for the same work.
class Op:
    def __init__(self, name, element, moved, torch_label):
        self.name, self.element, self.moved, self.torch_label = name, element, moved, torch_label


def ops_table(args):
    cols, chunk, group = args.cols, args.chunk, args.group
    return {
        "vector_add": Op("vector_add", 4, lambda n: 3 * 4 * n, "torch.add(out=)"),
        "axpby": Op("axpby", 4, lambda n: 3 * 4 * n, "y.mul_(b).add_(x, alpha=a): 2 kernels"),
        "gelu": Op("gelu", 4, lambda n: 2 * 4 * n, "aten.gelu.out(approximate=tanh)"),
        "gelu_bf16": Op("gelu_bf16", 2, lambda n: 2 * 2 * n, "aten.gelu.out(approximate=tanh), bf16"),
        "adamw": Op("adamw", 4, lambda n: 7 * 4 * n, "torch._fused_adamw_"),
        "adamw_bf16": Op("adamw_bf16", 4, lambda n: (6 * 4 + 2) * n, "none (fused AdamW wants one dtype)"),
        "quantize_int8": Op("quantize_int8", 4, lambda n: 5 * n + 4 * math.ceil(n / group), "composite: amax, div, round, to int8"),
        "dequantize_int8": Op("dequantize_int8", 4, lambda n: 5 * n + 4 * math.ceil(n / group), "composite: float() * scales"),
        "layer_norm": Op("layer_norm", 4, lambda n: 2 * 4 * n + 2 * 4 * cols, "F.layer_norm"),
        "row_softmax": Op("row_softmax", 4, lambda n: 2 * 4 * n, "aten._softmax.out"),
        "softmax_online": Op("softmax_online", 4, lambda n: 2 * 4 * n, "aten._softmax.out"),
        "reduce_sum": Op("reduce_sum", 4, lambda n: 4 * n + 4 * (n // chunk), "x.view(-1, chunk).sum(1)"),
        "sum_reduce": Op("sum_reduce", 4, lambda n: 4 * n, "torch.sum(x, dtype=float64)"),
    }


ROW_OPS = ("layer_norm", "row_softmax", "softmax_online")


def sizes(args):
    out, b = [], args.min
    while b <= args.max:
        out.append(b)
        b *= args.factor
    return out


def elements(op, size_bytes, args):
    """Elements of the op's main tensor at this size, rounded to what the op's shape needs; 0 when
    the size is too small for it (a row op's one row)."""
    n = size_bytes // op.element
    if op.name in ROW_OPS:
        return n // args.cols * args.cols
    if op.name == "reduce_sum":
        return n // args.chunk * args.chunk
    return n


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gpu_sweep.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="", help="comma-separated ops (default: all); --list-ops names them")
    p.add_argument("--list-ops", action="store_true", help="print the ops and what torch offers for each, and exit")
    p.add_argument("--min", type=parse_bytes, default=4 << 10, help="smallest size per tensor (default 4K)")
    p.add_argument("--max", type=parse_bytes, default=1 << 30, help="largest size per tensor (default 1G)")
    p.add_argument("--factor", type=int, default=4, help="each size is this many times the last (default 4)")
    p.add_argument("--cols", type=int, default=1024, help="row length of the row ops (default 1024)")
    p.add_argument("--chunk", type=int, default=4096, help="reduce_sum's chunk (default 4096)")
    p.add_argument("--group", type=int, default=128, help="the quantizers' group (default 128)")
    p.add_argument("--reps", type=int, default=7, help="timed batches per measurement (default 7)")
    p.add_argument("--batch-ms", type=float, default=1.0, help="a batch of calls lasts about this long (default 1 ms)")
    p.add_argument("--legacy", action="store_true", help="also launch kiln's ops a thread per element, as callers did before")
    p.add_argument("--json", default="", help="also write the rows to this file")
    p.add_argument("--plan", action="store_true", help="print the ops, sizes and bytes each call moves, without a GPU")
    p.add_argument("--on-cpu", action="store_true",
                   help="run the cases on kiln's CPU accelerator and torch's CPU ops (wall clock): checks the script without a GPU")
    args = p.parse_args(argv)
    table = ops_table(args)
    args.op_names = [o for o in args.ops.split(",") if o] or list(table)
    unknown = [o for o in args.op_names if o not in table]
    if unknown:
        p.error(f"unknown op {', '.join(unknown)}: the ops are {', '.join(table)}")
    if args.min > args.max:
        p.error(f"--min {human(args.min)} is above --max {human(args.max)}")
    if args.factor < 2:
        p.error("--factor must be 2 or more")
    for name in ("cols", "chunk", "group", "reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be 1 or more")
    return args, table


def print_plan(args, table):
    print(f"{'op':16s} {'per tensor':>10s} {'elements':>12s} {'bytes a call':>14s}  torch's side")
    for name in args.op_names:
        op = table[name]
        for size in sizes(args):
            n = elements(op, size, args)
            if n:
                print(f"{name:16s} {human(size):>10s} {n:12d} {op.moved(n):14d}  {op.torch_label}")


def skip(why):
    print(f"gpu_sweep: skipped: {why}", flush=True)
    return 0


# ---- on the GPU


def time_per_call(torch, fn, args):
    """Median seconds per call over args.reps batches, and the batches' min and max."""
    if args.on_cpu:
        fn()
        per_call = []
        for _ in range(args.reps):
            start = time.perf_counter()
            fn()
            per_call.append(time.perf_counter() - start)
        return statistics.median(per_call), min(per_call), max(per_call)
    fn()  # the first call compiles (or finds the op in the cache) and loads it
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end), 1e-3)  # ms
    calls = max(1, min(2000, int(args.batch_ms / one)))
    per_call = []
    for _ in range(args.reps):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(per_call), min(per_call), max(per_call)


class Case:
    """One op at one size: kiln's call, torch's, the check of kiln's result against torch's."""

    def __init__(self, kiln_call, torch_call, check, legacy_call=None):
        self.kiln_call, self.torch_call, self.check, self.legacy_call = kiln_call, torch_call, check, legacy_call


def max_diff(torch, got, want):
    return (got.double() - want.double()).abs().max().item() if got.numel() else 0.0


def ulps(torch, got, want, floor=1e-3):
    """The largest difference in float32 ulps of torch's value, over elements above `floor` in size
    (below it the spec's absolute tolerance rules, and ulps of tiny numbers mean little)."""
    big = want.abs() > floor
    if not big.any():
        return 0
    w = want[big].float()
    ulp = torch.nextafter(w.abs(), torch.full_like(w, math.inf)) - w.abs()
    return round(((got[big].double() - w.double()).abs() / ulp.double()).max().item(), 1)


def make_case(torch, kiln, ctx, name, n, args):
    dev = "cpu" if args.on_cpu else "cuda"
    cdiv = kiln.cdiv
    op = ctx.op(name)
    legacy = dict(grid=cdiv(n, 256), block=256)
    if name in ("vector_add", "axpby"):
        x, y, out = torch.randn(n, device=dev), torch.randn(n, device=dev), torch.empty(n, device=dev)
        if name == "vector_add":
            def check():
                op(x, y, out, n)
                return f"max |diff| {max_diff(torch, out, x + y):.1e}"
            return Case(lambda: op(x, y, out, n), lambda: torch.add(x, y, out=out), check, lambda: op(x, y, out, n, **legacy))

        def check():
            y0 = y.clone()
            op(2.5, x, -0.75, y0, n)
            want = y.clone().mul_(-0.75).add_(x, alpha=2.5)
            return f"max |diff| {max_diff(torch, y0, want):.1e}"
        return Case(lambda: op(2.5, x, -0.75, y, n), lambda: y.mul_(-0.75).add_(x, alpha=2.5), check,
                    lambda: op(2.5, x, -0.75, y, n, **legacy))
    if name in ("gelu", "gelu_bf16"):
        dtype = torch.float32 if name == "gelu" else torch.bfloat16
        x, y, ty = torch.randn(n, device=dev, dtype=dtype) * 3, torch.empty(n, device=dev, dtype=dtype), torch.empty(n, device=dev, dtype=dtype)

        def run_torch():
            torch.ops.aten.gelu.out(x, approximate="tanh", out=ty)

        def check():
            op(x, y, n)
            run_torch()
            text = f"max |diff| {max_diff(torch, y, ty):.1e}"
            if dtype == torch.float32:
                text += f", {ulps(torch, y, ty)} ulp where |torch| > 1e-3; vs double {max_diff(torch, y, torch.nn.functional.gelu(x.double(), approximate='tanh')):.1e}"
            else:
                text += f", {(y.view(torch.int16) != ty.view(torch.int16)).sum().item()} of {n} bf16 differ"
            return text
        return Case(lambda: op(x, y, n), run_torch, check, lambda: op(x, y, n, **legacy))
    if name in ("adamw", "adamw_bf16"):
        gdt = torch.float32 if name == "adamw" else torch.bfloat16
        p, g = torch.randn(n, device=dev), torch.randn(n, device=dev, dtype=gdt)
        m, v = torch.zeros(n, device=dev), torch.zeros(n, device=dev)
        step = torch.tensor([3.0], device=dev)
        hp = dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8)

        def run_kiln(**launch):
            op(p, g, m, v, hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["weight_decay"], 3, n, **launch)

        def run_torch():
            torch._fused_adamw_([p], [g], [m], [v], [], [step], amsgrad=False, maximize=False, **hp)

        def check():
            if gdt != torch.float32:
                return "no torch op to compare with"
            p0, m0, v0 = p.clone(), m.clone(), v.clone()
            run_kiln()
            kp, km, kv = p.clone(), m.clone(), v.clone()
            p.copy_(p0), m.copy_(m0), v.copy_(v0)
            run_torch()
            text = f"max |diff| p {max_diff(torch, kp, p):.1e} m {max_diff(torch, km, m):.1e} v {max_diff(torch, kv, v):.1e}"
            p.copy_(p0), m.copy_(m0), v.copy_(v0)
            return text
        fused = gdt == torch.float32 and hasattr(torch, "_fused_adamw_")  # torch 2.x has it

        def no_fused():
            return "no torch op to compare with (this torch has no _fused_adamw_)"
        return Case(run_kiln, run_torch if fused else None, check if fused or gdt != torch.float32 else no_fused,
                    lambda: run_kiln(**legacy))
    if name in ("quantize_int8", "dequantize_int8"):
        group = args.group
        groups = cdiv(n, group)
        x = torch.randn(n, device=dev) * 3
        q, scales, y = torch.empty(n, device=dev, dtype=torch.int8), torch.empty(groups, device=dev), torch.empty(n, device=dev)
        full = n // group * group

        def torch_quantize():
            amax = x[:full].view(-1, group).abs().amax(1)
            # A true division: 127.0 / t is t.reciprocal() * 127 in torch, another rounding.
            inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros_like(amax))
            q = torch.round(x[:full].view(-1, group) * inv[:, None]).to(torch.int8).flatten()
            # amax / 127.0 would multiply by the reciprocal on CUDA (another rounding): divide by a tensor.
            return q, amax / torch.full_like(amax, 127.0)

        if name == "quantize_int8":
            def check():
                op(x, q, scales, n, group)
                tq, ts = torch_quantize()
                return f"q differ {(q[:full] != tq).sum().item()}, scales differ {(scales[:full // group] != ts).sum().item()}"
            return Case(lambda: op(x, q, scales, n, group), torch_quantize, check,
                        lambda: op(x, q, scales, n, group, grid=cdiv(n, group * 8), block=256))
        ctx.op("quantize_int8")(x, q, scales, n, group)

        def torch_dequantize():
            return q[:full].float().view(-1, group) * scales[:full // group, None]

        def check():
            op(q, scales, y, n, group)
            return f"max |diff| {max_diff(torch, y[:full], torch_dequantize().flatten()):.1e}"
        return Case(lambda: op(q, scales, y, n, group), torch_dequantize, check,
                    lambda: op(q, scales, y, n, group, grid=cdiv(n, group * 8), block=256))
    if name in ROW_OPS:
        cols = args.cols
        rows = n // cols
        x, y = torch.randn(rows, cols, device=dev) * 4, torch.empty(rows, cols, device=dev)
        if name == "layer_norm":
            gamma, beta = torch.rand(cols, device=dev) + 0.5, torch.randn(cols, device=dev)

            def run_torch():
                return torch.nn.functional.layer_norm(x, (cols,), gamma, beta, 1e-5)

            def check():
                op(x, gamma, beta, y, rows, cols, 1e-5)
                return f"max |diff| {max_diff(torch, y, run_torch()):.1e}"
            return Case(lambda: op(x, gamma, beta, y, rows, cols, 1e-5), run_torch, check,
                        lambda: op(x, gamma, beta, y, rows, cols, 1e-5, grid=rows, block=128))
        ty = torch.empty_like(y)

        def run_torch():
            torch.ops.aten._softmax.out(x, 1, False, out=ty)

        def check():
            op(x, y, rows, cols)
            run_torch()
            return f"max |diff| {max_diff(torch, y, ty):.1e}"
        return Case(lambda: op(x, y, rows, cols), run_torch, check,
                    lambda: op(x, y, rows, cols, grid=rows, block=256, shared_bytes=64))
    if name == "reduce_sum":
        chunk = args.chunk
        x, partial = torch.randn(n, device=dev), torch.empty(n // chunk, device=dev)

        def check():
            op(x, partial, n, chunk)
            return f"max |diff| {max_diff(torch, partial, x.view(-1, chunk).double().sum(1)):.1e}"
        return Case(lambda: op(x, partial, n, chunk), lambda: x.view(-1, chunk).sum(1), check)
    if name == "sum_reduce":
        x, total = torch.randn(n, device=dev), torch.zeros(1, device=dev, dtype=torch.float64)

        def check():
            total.zero_()
            op(x, total, n)
            want = x.double().sum()
            return f"|diff| {abs(total.item() - want.item()):.1e} of {abs(want.item()):.1e}"
        return Case(lambda: op(x, total, n), lambda: torch.sum(x, dtype=torch.float64), check,
                    lambda: op(x, total, n, **legacy))
    raise ValueError(name)


def main(argv):
    args, table = parse_args(argv)
    if args.list_ops:
        for name, op in table.items():
            print(f"{name:16s} torch: {op.torch_label}")
        return 0
    if args.plan:
        print_plan(args, table)
        return 0
    try:
        import torch
    except ImportError as e:
        return skip(f"torch does not import ({e})")
    if not args.on_cpu and not torch.cuda.is_available():
        return skip(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)")
    try:
        import kiln
    except ImportError as e:
        return skip(f"kiln does not import ({e}): put build/python on PYTHONPATH or install the wheel")
    try:
        ctx = kiln.context("cpu" if args.on_cpu else "cuda")
    except kiln.KilnError as e:
        return skip(f"kiln has no CUDA accelerator here: {e}")

    if args.on_cpu:
        device, sms = "the CPU (--on-cpu: wall clock, one call a batch; not the GPU's figures)", 0
        args.legacy = False  # a thread per element means nothing to CPU kernels
    else:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        device, sms = props.name, props.multi_processor_count
    print(f"{device}, {sms} SMs, torch {torch.__version__} (CUDA {torch.version.cuda}), kiln from {kiln.__file__}")
    print(f"GB/s = bytes a call must move / time per call; time per call = median of {args.reps} batches of "
          f"back-to-back calls ({args.batch_ms:g} ms a batch), CUDA events; (min..max) over the batches")
    rows = []
    copies = {}
    header = (f"{'op':16s} {'per tensor':>10s} {'us/call':>9s} {'kiln GB/s':>10s} {'(min..max)':>15s} {'torch GB/s':>10s} "
              f"{'copy GB/s':>9s} {'of copy':>7s} {'of torch':>8s}  check")
    for name in args.op_names:
        op = table[name]
        print()
        print(f"== {name} (torch: {op.torch_label})")
        print(header)
        for size in sizes(args):
            n = elements(op, size, args)
            if n == 0:
                continue
            if size not in copies:
                where = "cpu" if args.on_cpu else "cuda"
                src, dst = torch.randn(size // 4, device=where), torch.empty(size // 4, device=where)
                c = time_per_call(torch, lambda: dst.copy_(src), args)
                copies[size] = (2 * size / c[0] / 1e9, c)
                del src, dst
            copy_gbs = copies[size][0]
            try:
                case = make_case(torch, kiln, ctx, name, n, args)
                check = case.check()
                k = time_per_call(torch, case.kiln_call, args)
                t = time_per_call(torch, case.torch_call, args) if case.torch_call else None
            except (RuntimeError, kiln.KilnError) as e:  # out of memory at the largest sizes, a launch error
                print(f"{name:16s} {human(size):>10s}  FAILED: {str(e).splitlines()[0]}")
                rows.append({"op": name, "bytes": size, "error": str(e)})
                if not args.on_cpu:
                    torch.cuda.empty_cache()
                continue
            moved = op.moved(n)
            gbs = moved / k[0] / 1e9
            spread = f"({moved / k[2] / 1e9:.0f}..{moved / k[1] / 1e9:.0f})"
            tgbs = moved / t[0] / 1e9 if t else None
            row = {"op": name, "bytes": size, "elements": n, "moved": moved, "us": k[0] * 1e6, "gbs": gbs,
                   "gbs_min": moved / k[2] / 1e9, "gbs_max": moved / k[1] / 1e9, "torch_gbs": tgbs, "copy_gbs": copy_gbs,
                   "check": check}
            print(f"{name:16s} {human(size):>10s} {k[0] * 1e6:9.1f} {gbs:10.0f} {spread:>15s} "
                  f"{(f'{tgbs:.0f}' if tgbs else '-'):>10s} {copy_gbs:9.0f} {gbs / copy_gbs:7.0%} "
                  f"{(f'{gbs / tgbs:.0%}' if tgbs else '-'):>8s}  {check}")
            if args.legacy and case.legacy_call:
                lg = time_per_call(torch, case.legacy_call, args)
                row["legacy_gbs"] = moved / lg[0] / 1e9
                print(f"{'  thread/element':16s} {human(size):>10s} {lg[0] * 1e6:9.1f} {moved / lg[0] / 1e9:10.0f}")
            rows.append(row)
            del case
            if not args.on_cpu:
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "sms": sms, "torch": torch.__version__,
                       "time": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args) | {"op_names": args.op_names},
                       "rows": rows}, f, indent=1, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
