"""DeepSpeed's own CUDA ops, built by kiln, run on a GPU against torch references (#28 item 4).

kiln.deepspeed.install(fallback=False) makes DeepSpeed's own optimizer classes (FusedAdam,
FusedLamb) build their ops through kiln and never through DeepSpeed's loader, so a module that
kiln built wrong fails here rather than being replaced by nvcc's. The sources are the installed
DeepSpeed package's own, read at build time.

- FusedAdam (adam_w_mode on and off, fp32 and bf16 parameters) against torch.optim.AdamW / Adam;
- FusedLamb against LAMB written in torch as DeepSpeed's kernel computes it (per-tensor trust
  ratio clamped to [min_coeff, max_coeff], bias correction folded into the step size);
- the quantizer's `quantize` / `dequantize` (8-bit, symmetric and asymmetric groups) against the
  same arithmetic in torch. DeepSpeed builds with --use_fast_math (approximate division and
  reciprocal), so the per-group parameters may differ by a few ulps and a value on a rounding
  boundary by one step: at most 0.1% of them, by at most 1.

Needs a CUDA GPU and DeepSpeed; CI has no GPU, so there every test here skips, saying so.
"""
import os

import pytest

torch = pytest.importorskip("torch", reason="the DeepSpeed GPU tests need torch")
pytest.importorskip("kiln.torch", reason="kiln's Python package is not built (PYTHONPATH=<build>/python)")


def _skip_reason():
    if not torch.cuda.is_available():
        return "needs a CUDA GPU: torch.cuda.is_available() is False on this machine (torch %s)" % torch.__version__
    try:
        import deepspeed  # noqa: F401
    except Exception as e:  # ImportError, or DeepSpeed failing against this torch
        return "DeepSpeed cannot be imported with torch %s: %r" % (torch.__version__, e)
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


@pytest.fixture(scope="module", autouse=True)
def deepspeed_through_kiln(tmp_path_factory):
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(tmp_path_factory.mktemp("torch_extensions")))
    # This GPU's architecture as DeepSpeed 0.19.8 can read it: its compute_capability_args parses
    # each entry as numbers, and a machine's "9.0a" (Hopper's arch-specific features) stops it.
    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = "%d.%d" % (major, minor)
    import kiln.deepspeed as kds
    kds.install(fallback=False)  # a module kiln cannot build fails the test
    yield
    kds.uninstall()


def _grads(params, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(p.shape, device="cuda", generator=g).to(p.dtype) for p in params]


SHAPES = [(1000,), (4097,), (257, 1031), (3, 65536 + 7)]  # odd sizes: the kernels' tails


@pytest.mark.parametrize("adam_w_mode", [True, False], ids=["adamw", "adam-l2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_adam_steps_as_torch_adam_does(adam_w_mode, dtype):
    from deepspeed.ops.adam import FusedAdam
    torch.manual_seed(0)
    start = [torch.randn(s, device="cuda") for s in SHAPES]
    ours = [p.clone().to(dtype).requires_grad_() for p in start]
    theirs = [p.clone().requires_grad_() for p in start]  # torch's reference in fp32
    hyper = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)
    opt = FusedAdam(ours, adam_w_mode=adam_w_mode, **hyper)
    ref = (torch.optim.AdamW if adam_w_mode else torch.optim.Adam)(theirs, foreach=False, **hyper)
    for step in range(5):
        for p, q, g in zip(ours, theirs, _grads(start, step)):
            p.grad, q.grad = g.to(dtype).clone(), g.to(dtype).float()
        opt.step()
        ref.step()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p.detach().float(), q.detach(), **tol)


def _lamb_reference(p, g, m, v, step, lr, b1, b2, eps, decay, max_coeff, min_coeff):
    """One LAMB step as DeepSpeed's fused_lamb_cuda_kernel.cu computes it (eps outside the root)."""
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    update = m / (v.sqrt() + eps) + decay * p
    w, u = p.norm(), update.norm()
    coeff = (w / u).clamp(min_coeff, max_coeff) if w != 0 and u != 0 else torch.tensor(1.0, device=p.device)
    step_size = lr * (1 - b2**step) ** 0.5 / (1 - b1**step)
    p.sub_(step_size * coeff * update)
    return coeff.item()


def test_fused_lamb_steps_as_lamb_in_torch_does():
    from deepspeed.ops.lamb import FusedLamb
    torch.manual_seed(1)
    start = [torch.randn(s, device="cuda") for s in SHAPES]
    ours = [p.clone().requires_grad_() for p in start]
    theirs = [p.clone() for p in start]
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in start]
    hyper = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, max_coeff=10.0, min_coeff=0.01)
    opt = FusedLamb(ours, **hyper)
    for step in range(1, 6):
        grads = _grads(start, 100 + step)
        for p, g in zip(ours, grads):
            p.grad = g
        opt.step()
        coeffs = [_lamb_reference(q, g, m, v, step, hyper["lr"], *hyper["betas"], hyper["eps"], hyper["weight_decay"],
                                  hyper["max_coeff"], hyper["min_coeff"])
                  for q, g, (m, v) in zip(theirs, grads, state)]
        assert opt.get_lamb_coeffs() == pytest.approx(coeffs, rel=1e-4)
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p.detach(), q, rtol=1e-5, atol=1e-6)


def _quantize_reference(x, groups, asymmetric):
    """8-bit group quantization as DeepSpeed's quantization_utils.h computes it, in float32."""
    v = x.float().reshape(groups, -1)
    if asymmetric:
        hi, lo = v.max(dim=1, keepdim=True).values, v.min(dim=1, keepdim=True).values
        scale = torch.where(hi == lo, torch.ones_like(hi), 256.0 / (hi - lo))
        offset = (hi + lo) / 2
        q = ((v - offset) * scale).round().clamp(-128, 127).to(torch.int8)
        params = torch.cat([1 / scale, offset], dim=1)
    else:
        top = v.abs().max(dim=1, keepdim=True).values
        scale = torch.where(top == 0, torch.ones_like(top), 256.0 / (2 * top))
        q = (v * scale).round().clamp(-128, 127).to(torch.int8)
        params = 1 / scale
    return q.reshape(x.shape), params


@pytest.mark.parametrize("asymmetric", [False, True], ids=["symmetric", "asymmetric"])
def test_quantizer_quantizes_as_its_arithmetic_in_torch_does(asymmetric):
    from deepspeed.ops.op_builder import QuantizerBuilder
    op = QuantizerBuilder().load()  # through kiln (install(fallback=False))
    kind = op.QuantizationType.Asymmetric if asymmetric else op.QuantizationType.Symmetric
    torch.manual_seed(2)
    groups = 64
    x = (torch.randn(groups, 4096, device="cuda") * torch.linspace(0.1, 8, groups, device="cuda")[:, None]).half()
    x[5].zero_()  # a group of zeros: scale 1
    q, params = op.quantize(x, groups, 8, kind)
    q_ref, params_ref = _quantize_reference(x, groups, asymmetric)
    torch.testing.assert_close(params.reshape(params_ref.shape), params_ref, rtol=1e-6, atol=0)
    off = (q.int() - q_ref.int()).abs()
    assert off.max().item() <= 1 and (off != 0).sum().item() <= q.numel() // 1000, \
        "%d of %d int8 values differ from torch's (by up to %d)" % ((off != 0).sum().item(), q.numel(), off.max().item())
    back = op.dequantize_fp32(q, params, groups, 8, kind).reshape(groups, -1)
    scale = params.reshape(groups, -1)
    expected = q.float().reshape(groups, -1) * scale[:, :1] + (scale[:, 1:] if asymmetric else 0)
    torch.testing.assert_close(back, expected, rtol=1e-5, atol=1e-5)
    # and the round trip lands within half a step (plus the one-step boundary cases) of the input
    assert ((back - x.float().reshape(groups, -1)).abs() <= scale[:, :1] * 1.5 + 1e-3).all()
