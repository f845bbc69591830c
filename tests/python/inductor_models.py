"""Models that torch.compile builds on the CPU, shared by test_inductor.py and tools/bench/compare.

run_cases() compiles and runs each case in this process and returns its tensors (CPU, detached),
so a parent can compare what g++'s kernels and kiln's kernels compute. The cases cover what
Inductor's C++ backend emits: float32 forward and backward (reductions, softmax, layer norm,
GELU, matmuls through the C++ wrapper), bfloat16, and dynamic shapes.
"""
import os
import re
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    """A pre-norm transformer block (attention and MLP), as small language models write it."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


def transformer(d=256, blocks=2, heads=4):
    torch.manual_seed(0)
    return nn.Sequential(*[Block(d, heads) for _ in range(blocks)]).eval()


def run_cases(small=True, backend="inductor"):
    """{name: tensor} for each case, compiled with torch.compile(backend=backend) in this process."""
    saved = torch.compile
    torch.compile = lambda f, **kw: saved(f, backend=backend, **kw)
    try:
        return _run_cases(small)
    finally:
        torch.compile = saved


def _run_cases(small):
    torch.manual_seed(0)
    d = 64 if small else 256
    out = {}
    model = transformer(d, blocks=1 if small else 2, heads=4)
    x = torch.randn(2, 16, d)

    # float32, forward and backward.
    train = transformer(d, blocks=1, heads=4).train()
    compiled = torch.compile(train)
    y = compiled(x)
    y.square().mean().backward()
    out["f32.forward"] = y.detach()
    for name, p in train.named_parameters():
        out["f32.grad." + name] = p.grad.detach().clone()

    # bfloat16 inference.
    with torch.no_grad():
        out["bf16.forward"] = torch.compile(transformer(d, blocks=1, heads=4).to(torch.bfloat16))(x.to(torch.bfloat16)).float()

    # Dynamic shapes: one compile serves two sequence lengths.
    def attention_scores(q):
        return (q @ q.transpose(-2, -1)).softmax(-1) * 2 + q.sum(-1, keepdim=True)

    dyn = torch.compile(attention_scores, dynamic=True)
    for n in (8, 13):
        out["dynamic.%d" % n] = dyn(torch.randn(n, d))

    with torch.no_grad():
        out["eval.forward"] = torch.compile(model)(x)
    return out


def first_call_seconds(d=256, blocks=2):
    """The first call of the issue's model (compile included), in seconds."""
    model = transformer(d, blocks)
    x = torch.randn(4, 64, d)
    compiled = torch.compile(model)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(x)
    return time.perf_counter() - start


def openmp_libraries():
    """The OpenMP runtimes mapped into this process (GCC's libgomp, LLVM's libomp, Intel's libiomp5)."""
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if re.match(r"lib(gomp|omp|iomp5)[.-]", os.path.basename(path)):
                found.add(path)
    return sorted(found)
