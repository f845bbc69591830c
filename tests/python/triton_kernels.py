"""Triton kernels as Triton's tutorials write them, compiled for an explicit GPUTarget (no driver
needed: Triton's bundled ptxas makes the cubin) by tests/python/test_triton.py and its child
processes. compile_kernels() returns what each compile gave and how many compiles ran (Triton's
compilation listener sees every compile and every cache hit)."""
import hashlib

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr,
                   num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


@triton.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    mean = 0
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


def get_autotune_config():
    return [
        triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 256, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 8}, num_stages=3, num_warps=8),
        triton.Config({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 256, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4, num_warps=4),
        triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4, num_warps=4),
    ]


@triton.autotune(configs=get_autotune_config(), key=['M', 'N', 'K'])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                  ACTIVATION: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def _matmul_source(config):
    sig = {name: "*fp16" for name in ("a_ptr", "b_ptr", "c_ptr")}
    sig.update({name: "i32" for name in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")})
    constexprs = dict(config.kwargs, ACTIVATION="")
    for name in constexprs:
        sig[name] = "constexpr"
    # The autotuner's configs are compiled as the JIT compiles them: the kernel under the
    # Autotuner, one compile per config (num_warps and num_stages are options).
    return triton.compiler.ASTSource(matmul_kernel.fn, sig, constexprs), {"num_warps": config.num_warps,
                                                                          "num_stages": config.num_stages}


def sources():
    """name -> (ASTSource, options) for every kernel the tests compile."""
    add_sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32", "BLOCK_SIZE": "constexpr"}
    softmax_sig = {"output_ptr": "*fp32", "input_ptr": "*fp32", "input_row_stride": "i32", "output_row_stride": "i32",
                   "n_rows": "i32", "n_cols": "i32", "BLOCK_SIZE": "constexpr", "num_stages": "constexpr"}
    ln_sig = {"X": "*fp16", "Y": "*fp16", "W": "*fp16", "B": "*fp16", "Mean": "*fp32", "Rstd": "*fp32", "stride": "i32",
              "N": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}
    out = {
        "add": (triton.compiler.ASTSource(add_kernel, add_sig, {"BLOCK_SIZE": 1024}), {}),
        "softmax": (triton.compiler.ASTSource(softmax_kernel, softmax_sig, {"BLOCK_SIZE": 1024, "num_stages": 4}), {"num_warps": 8}),
        "layer_norm": (triton.compiler.ASTSource(_layer_norm_fwd_fused, ln_sig, {"BLOCK_SIZE": 1024}), {"num_warps": 8}),
        "matmul": _matmul_source(get_autotune_config()[2]),
    }
    return out


class Listener:
    """Counts Triton's compiles and cache hits (knobs.compilation.listener)."""

    def __init__(self):
        self.compiles = 0
        self.hits = 0
        triton.knobs.compilation.listener = self

    def __call__(self, *, src, metadata, metadata_group, times, cache_hit):
        if cache_hit:
            self.hits += 1
        else:
            self.compiles += 1


def compile_kernels(names=None):
    """{"compiles": n, "hits": n, "cubins": {name: sha256}, "paths": {name: cubin path}}."""
    listener = Listener()
    cubins, paths = {}, {}
    for name, (src, options) in sources().items():
        if names is not None and name not in names:
            continue
        kernel = triton.compile(src, target=TARGET, options=options)
        cubins[name] = hashlib.sha256(kernel.asm["cubin"]).hexdigest()
        paths[name] = next(p for n, p in kernel.metadata_group.items() if n.endswith(".cubin"))
    return {"compiles": listener.compiles, "hits": listener.hits, "cubins": cubins, "paths": paths}


@triton.jit
def broken_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), undefined_name)  # noqa: F821: the compile error


def broken_source():
    return triton.compiler.ASTSource(broken_kernel, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 64})
