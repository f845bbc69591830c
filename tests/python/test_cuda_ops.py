"""The bundled bandwidth-bound ops on CUDA tensors against torch's own results, over sizes with odd
tails and tensors that start off a 16-byte boundary (views one to three elements into a buffer),
launched as their specs say (no grid: the [cuda] launch, sized to the device) and as older
callers did (a thread per element). On a machine without a GPU the CUDA cases skip, saying so;
the same cases run on the CPU accelerator here, which checks the harness itself (its torch
references, views and tolerances) against kiln's CPU kernels. Speed is not measured here:
tools/bench/gpu_sweep.py does that."""
import math

import pytest

import kiln

torch = pytest.importorskip("torch")


def _device_or_skip(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the CUDA half of these tests runs on a GPU machine (tools/gpu-wheel-check)")
    torch.manual_seed(38)
    return device


DEVICES = ["cpu", "cuda"]
SIZES = [1, 2, 3, 5, 8, 31, 255, 1000, 4099, 65537, 1 << 20]
OFFSETS = [0, 1, 2, 3]  # elements into a buffer: 0 is 16-byte aligned, 1..3 are not


def view(buffer_factory, n, offset, device, dtype=torch.float32):
    """n elements starting `offset` elements into a fresh buffer (a contiguous view, misaligned
    for offsets that are not multiples of 16 bytes)."""
    return buffer_factory(n + offset, dtype=dtype, device=device)[offset:offset + n]


def launches(op, device, n_threads):
    """The spec's launch, and on CUDA the thread-per-element one older callers make."""
    out = [{}]
    if device == "cuda":
        out.append({"grid": kiln.cdiv(n_threads, 256), "block": 256})
    return out


def op_on(name, device):
    return kiln.context(device).op(name)


@pytest.mark.parametrize("device", DEVICES)
def test_vector_add_and_axpby_over_sizes_and_offsets(device):
    _device_or_skip(device)
    add, axpby = op_on("vector_add", device), op_on("axpby", device)
    for n in SIZES:
        for offset, b_offset in [(o, o) for o in OFFSETS] + [(o, (o + 1) % 4) for o in OFFSETS]:
            a, b = view(torch.randn, n, offset, device), view(torch.randn, n, b_offset, device)
            out = view(torch.empty, n, offset, device)
            for launch in launches(add, device, n):
                out.fill_(float("nan"))
                add(a, b, out, n, **launch)
                assert torch.equal(out, a + b), (n, offset, launch)
                y = view(torch.randn, n, offset, device)
                want = (2.5 * a.double() - 0.75 * y.double()).float()
                axpby(2.5, a, -0.75, y, n, **launch)
                assert torch.allclose(y, want, rtol=1e-6, atol=1e-6), (n, offset, launch)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gelu_matches_torch_over_sizes_and_offsets(device, dtype):
    _device_or_skip(device)
    gelu = op_on("gelu" if dtype == torch.float32 else "gelu_bf16", device)
    # The specs' tolerances: fp32 against the double-precision formula, bf16 a bf16 ulp or so.
    rtol, atol = (1e-5, 1e-6) if dtype == torch.float32 else (8e-3, 1e-3)
    for n in SIZES:
        for offset in OFFSETS:
            x = view(torch.randn, n, offset, device, dtype) * 4
            y = view(torch.empty, n, offset, device, dtype)
            want = torch.nn.functional.gelu(x.double(), approximate="tanh")
            for launch in launches(gelu, device, n):
                y.fill_(float("nan"))
                gelu(x, y, n, **launch)
                assert torch.allclose(y.double(), want, rtol=rtol, atol=atol), (n, offset, launch)
                if device == "cuda" and dtype == torch.float32:
                    # torch's own op computes the same formula with the same tanhf: equal but for
                    # the compilers' FMA contraction (tools/bench/gpu_sweep.py reports the ulps).
                    ours = torch.nn.functional.gelu(x, approximate="tanh")
                    assert torch.allclose(y, ours, rtol=2e-6, atol=1e-6), (n, offset, (y - ours).abs().max().item())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16])
def test_adamw_matches_torch_optim_over_sizes_and_offsets(device, grad_dtype):
    _device_or_skip(device)
    adamw = op_on("adamw" if grad_dtype == torch.float32 else "adamw_bf16", device)
    for n in [1, 3, 1000, 4099, 65537]:
        for offset in OFFSETS:
            p = view(torch.randn, n, offset, device)
            g = view(torch.randn, n, (offset + 2) % 4, device, grad_dtype)
            m, v = view(torch.zeros, n, offset, device), view(torch.zeros, n, offset, device)
            ref = p.detach().double().clone().requires_grad_(True)
            opt = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
            for step in (1, 2, 3):
                ref.grad = g.double()
                opt.step()
                adamw(p, g, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.01, step, n)
            assert torch.allclose(p.double(), ref.detach(), rtol=1e-5, atol=1e-6), (n, offset)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_and_dequantize_are_exact_over_groups_and_offsets(device):
    _device_or_skip(device)
    quantize, dequantize = op_on("quantize_int8", device), op_on("dequantize_int8", device)
    for n in [1, 7, 129, 1000, 4099, 65537]:
        for group in [1, 3, 32, 100, 128, 2048]:
            for offset in [0, 1]:
                x = view(torch.randn, n, offset, device) * 3
                groups = kiln.cdiv(n, group)
                q = view(torch.empty, n, offset, device, torch.int8)
                scales = torch.empty(groups, device=device)
                quantize(x, q, scales, n, group)
                # The same float arithmetic: max|x| per group, 127 / max, x * that rounded to
                # nearest even (torch.round), max / 127.
                padded = torch.zeros(groups * group, device=device)
                padded[:n] = x
                amax = padded.view(groups, group).abs().amax(1)
                # A true division: 127.0 / t is t.reciprocal() * 127 in torch, another rounding.
                inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros_like(amax))
                want_q = torch.round(padded.view(groups, group) * inv[:, None]).flatten()[:n].to(torch.int8)
                assert torch.equal(q, want_q), (n, group, offset)
                # Tensor by tensor: torch divides by a Python number as a multiplication by its reciprocal on CUDA.
                assert torch.equal(scales, amax / torch.full_like(amax, 127.0)), (n, group, offset)
                y = view(torch.empty, n, offset, device)
                dequantize(q, scales, y, n, group)
                want_y = (q.float().view(-1)[:n] * scales.repeat_interleave(group)[:n])
                assert torch.equal(y, want_y), (n, group, offset)


ROWS = [(1, 1), (3, 5), (2, 33), (5, 127), (4, 512), (3, 513), (64, 1000), (8, 4096), (2, 9001), (4096, 256)]


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_matches_torch_over_row_widths_and_offsets(device):
    _device_or_skip(device)
    layer_norm = op_on("layer_norm", device)
    for rows, cols in ROWS:
        for offset in OFFSETS:
            x = view(torch.randn, rows * cols, offset, device) * 2 + 0.5
            gamma, beta = torch.rand(cols, device=device) + 0.5, torch.randn(cols, device=device)
            y = view(torch.empty, rows * cols, offset, device)
            layer_norm(x, gamma, beta, y, rows, cols, 1e-5)
            want = torch.nn.functional.layer_norm(x.double().view(rows, cols), (cols,), gamma.double(), beta.double(), 1e-5)
            assert torch.allclose(y.double().view(rows, cols), want, rtol=1e-4, atol=1e-5), (rows, cols, offset)
            if device == "cuda":
                layer_norm(x, gamma, beta, y, rows, cols, 1e-5, grid=rows, block=128)  # a block per row, as before
                assert torch.allclose(y.double().view(rows, cols), want, rtol=1e-4, atol=1e-5), (rows, cols, offset)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["row_softmax", "softmax_online"])
def test_softmax_matches_torch_over_row_widths_and_offsets(device, name):
    _device_or_skip(device)
    softmax = op_on(name, device)
    for rows, cols in ROWS:
        for offset in OFFSETS:
            x = view(torch.randn, rows * cols, offset, device) * 8
            y = view(torch.empty, rows * cols, offset, device)
            want = torch.softmax(x.double().view(rows, cols), dim=1)
            softmax(x, y, rows, cols)
            assert torch.allclose(y.double().view(rows, cols), want, rtol=1e-5, atol=1e-7), (name, rows, cols, offset)
            if device == "cuda":
                softmax(x, y, rows, cols, grid=rows, block=256, shared_bytes=256 // 32 * 8)  # a block per row, as before
                assert torch.allclose(y.double().view(rows, cols), want, rtol=1e-5, atol=1e-7), (name, rows, cols, offset)


@pytest.mark.parametrize("device", DEVICES)
def test_reductions_over_sizes_and_offsets(device):
    _device_or_skip(device)
    reduce_sum, sum_reduce = op_on("reduce_sum", device), op_on("sum_reduce", device)
    for n in [1, 5, 4097, 65537, 1 << 20]:
        for offset in OFFSETS:
            x = view(torch.randn, n, offset, device)
            for chunk in [3, 4096]:
                partial = torch.empty(kiln.cdiv(n, chunk), device=device)
                reduce_sum(x, partial, n, chunk)
                padded = torch.zeros(partial.numel() * chunk, dtype=torch.float64, device=device)
                padded[:n] = x.double()
                assert torch.allclose(partial.double(), padded.view(-1, chunk).sum(1), rtol=1e-4, atol=1e-4), (n, chunk, offset)
            total = torch.zeros(1, dtype=torch.float64, device=device)
            sum_reduce(x, total, n)
            assert math.isclose(total.item(), x.double().sum().item(), rel_tol=1e-9, abs_tol=1e-9), (n, offset)


def test_the_cuda_launch_is_sized_to_the_device():
    _device_or_skip("cuda")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    add = op_on("vector_add", "cuda")
    # [cuda] grid = "min(cdiv(n, block * 8), sm_count * 256)", block 256.
    assert add.launch_shape(n=1 << 28) == (min(kiln.cdiv(1 << 28, 2048), sms * 256), 256, 0)
    assert add.launch_shape(n=1000) == (1, 256, 0)
    assert op_on("layer_norm", "cuda").launch_shape(rows=1 << 20, cols=1024)[0] == sms * 64


def test_the_cpu_launch_is_the_checks():
    add = op_on("vector_add", "cpu")
    assert add.launch_shape(n=1000003) == (kiln.cdiv(1000003, 256), 256, 0)
    assert kiln.op("vector_add").launch_shape(device="cpu", n=1000003) == (kiln.cdiv(1000003, 256), 256, 0)
    assert op_on("softmax_online", "cpu").launch_shape(rows=7, cols=100) == (7, 1, 1 // 32 * 8)
