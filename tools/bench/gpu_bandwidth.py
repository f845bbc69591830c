"""kiln's bandwidth-bound ops on CUDA tensors, on torch's current stream, against torch's results
and against the device's memory bandwidth as torch's own device-to-device copy reaches it, in
one process (run by tools/gpu-wheel-check on a GPU machine). Prints one row per op: GB/s (bytes
the op must move / median time over CUDA events), the fraction of the copy's GB/s, and the
largest difference from torch's result."""
import statistics
import sys

import torch

import kiln

if not torch.cuda.is_available():
    print("gpu_bandwidth: skipped: torch sees no GPU", flush=True)
    sys.exit(0)

n = 1 << 28  # 1 GiB of float32 per tensor: far past any cache
reps = 20


def timed_ms(fn):
    fn()  # the first call compiles (or finds the op in the cache) and loads it
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times)


x, y, out = torch.rand(n, device="cuda"), torch.rand(n, device="cuda"), torch.empty(n, device="cuda")
rows = []
copy_ms = timed_ms(lambda: out.copy_(x))
copy_gbs = 2 * 4 * n / copy_ms[0] / 1e6
rows.append(("torch copy_ (the reference)", copy_ms, copy_gbs, 0.0))

add = kiln.op("vector_add")
add_ms = timed_ms(lambda: add(x, y, out, n, grid=kiln.cdiv(n, 256), block=256))
rows.append(("kiln vector_add", add_ms, 3 * 4 * n / add_ms[0] / 1e6, (out - (x + y)).abs().max().item()))

gelu = kiln.op("gelu")
gelu_ms = timed_ms(lambda: gelu(x, out, n, grid=kiln.cdiv(n, 256), block=256))
rows.append(("kiln gelu (tanh)", gelu_ms, 2 * 4 * n / gelu_ms[0] / 1e6,
             (out - torch.nn.functional.gelu(x, approximate="tanh")).abs().max().item()))
torch_gelu_ms = timed_ms(lambda: torch.nn.functional.gelu(x, approximate="tanh"))
rows.append(("torch gelu (tanh), for comparison", torch_gelu_ms, 2 * 4 * n / torch_gelu_ms[0] / 1e6, 0.0))

print(f"{torch.cuda.get_device_name(0)}, {n} float32 per tensor, median (min..max) of {reps}")
for name, (med, lo, hi), gbs, diff in rows:
    print(f"{name:36s} {med:8.3f} ms ({lo:.3f}..{hi:.3f})  {gbs:7.0f} GB/s  {gbs / copy_gbs:5.0%} of copy  max |diff| {diff:.2e}")
