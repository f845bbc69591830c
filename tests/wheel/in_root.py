"""Run inside the fresh Debian root (tests/wheel/run), in a venv where only kiln's wheel and
Triton were pip-installed beside Debian's torch: what a user of the wheel does first on a machine
with no LLVM. Each step prints one line; any failure raises. Arguments: the folder holding the
test's inputs (kiln's test extension and DeepSpeed-style op sources, copied in by run)."""
import glob
import os
import subprocess
import sys
import tempfile
import time

inputs = sys.argv[1]
steps = []


def step(name):
    def wrap(fn):
        start = time.perf_counter()
        result = fn()
        print(f"wheel-test: ok   {name} ({(time.perf_counter() - start) * 1e3:.0f} ms){': ' + result if result else ''}", flush=True)
        steps.append(name)
        return fn
    return wrap


@step("no Clang and no LLVM kiln could use on this machine")
def _():
    found = glob.glob("/usr/lib/llvm-*") + glob.glob("/usr/lib/x86_64-linux-gnu/libLLVM*22*") + glob.glob("/usr/lib/x86_64-linux-gnu/libclang*")
    assert not found, found
    ldconfig = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    assert "libclang-cpp" not in ldconfig and "libLLVM.so.22" not in ldconfig, ldconfig
    assert not any(os.path.exists(os.path.join(d, c)) for d in os.environ["PATH"].split(":") for c in ("clang", "clang++", "clang-22"))


import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.deepspeed  # noqa: E402
import kiln.torch  # noqa: E402


@step("kiln is the installed wheel")
def _():
    assert "site-packages" in kiln.__file__, kiln.__file__
    toolchain = glob.glob(os.path.join(os.path.dirname(kiln.__file__), "lib", "kiln", "libkiln_jit_clang.so"))
    assert toolchain, "the wheel carries no toolchain library"
    needed = subprocess.run(["ldd", toolchain[0]], capture_output=True, text=True).stdout
    assert "not found" not in needed and "LLVM" not in needed and "clang" not in needed, needed
    # Its Clang, LLVM and lld are private to it: it exports kiln's two entries and nothing else.
    symbols = subprocess.run(["nm", "-D", "--defined-only", toolchain[0]], capture_output=True, text=True, check=True).stdout
    exported = sorted(line.split()[-1] for line in symbols.splitlines() if len(line.split()) == 3 and line.split()[1].isupper())
    assert exported == ["kiln_jit_clang_toolchain", "kiln_spirv_emit_main"], exported[:20]
    return f"{kiln.__file__}; the toolchain library exports {', '.join(exported)}"


@step("the preloaded NVRTC library is in the wheel, with its store side's libraries found")
def _():
    cli = os.path.join(os.path.dirname(kiln.__file__), "bin", "kiln")
    done = subprocess.run([cli, "nvrtc", "--preload"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shim = done.stdout.strip()
    assert shim == os.path.join(os.path.dirname(kiln.__file__), "lib", "kiln", "libkiln_nvrtc.so"), shim
    for lib in (shim, os.path.join(os.path.dirname(shim), "libkiln_nvrtc_store.so")):
        needed = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
        assert "not found" not in needed, needed
    symbols = subprocess.run(["nm", "-D", "--defined-only", shim], capture_output=True, text=True, check=True).stdout
    others = [l.split()[-1] for l in symbols.splitlines()
              if len(l.split()) == 3 and not l.split()[-1].startswith(("nvrtc", "__nvrtc", "kiln_nvrtc_preload_real_library", "libnvrtc"))]
    assert not others, others[:10]
    return shim + (" (no real NVRTC in this root: " + done.stderr.strip()[:60] + "...)" if done.stderr else "")


def triton_kernels():
    """Two Triton kernels compiled for an explicit GPUTarget (sm_90, no driver needed): Triton's
    own LLVM (inside libtriton.so) runs in this process, as in a job that uses both."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    target = GPUTarget("cuda", 90, 32)
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    cubins = []
    for block in (256, 512):
        compiled = triton.compile(ASTSource(add_kernel, sig, constexprs={"BLOCK": block}), target=target)
        assert compiled.asm["cubin"][:4] == b"\x7fELF", "no cubin"
        assert ".target sm_90" in compiled.asm["ptx"]
        cubins.append(compiled.asm["cubin"])
    return cubins


os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said outright (else a warning)
# A private Triton cache per phase, so each compiles for real instead of hitting the first's.
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-before-")


before = []


@step("Triton kernels compiled before kiln compiles")
def _():
    before.extend(triton_kernels())
    return f"{len(before)} cubins"


@step("kiln.op('vector_add') on torch tensors (compiled by the wheel's Clang)")
def _():
    n = 10_000
    a, b, out = torch.rand(n), torch.rand(n), torch.empty(n)
    kiln.op("vector_add")(a, b, out, n, grid=kiln.cdiv(n, 256), block=256)
    assert torch.equal(out, a + b)


@step("kiln.torch.load of a torch extension (lltm.cpp)")
def _():
    lltm = kiln.torch.load(name="wheel_lltm", sources=[os.path.join(inputs, "lltm.cpp")], extra_cflags=["-O2"])
    batch, features, state = 4, 8, 16
    x, h, c = torch.randn(batch, features), torch.randn(batch, state), torch.randn(batch, state)
    weights, bias = torch.randn(3 * state, features + state), torch.randn(3 * state)
    new_h, new_c, *_ = lltm.forward(x, weights, bias, h, c)
    # The LLTM tutorial's forward, in torch.
    gates = torch.addmm(bias, torch.cat([h, x], dim=1), weights.t()).chunk(3, dim=1)
    input_gate, output_gate, candidate = torch.sigmoid(gates[0]), torch.sigmoid(gates[1]), torch.nn.functional.elu(gates[2])
    ref_c = c + candidate * input_gate
    assert torch.allclose(new_c, ref_c, atol=1e-5) and torch.allclose(new_h, torch.tanh(ref_c) * output_gate, atol=1e-5)


class DeepSpeedStyleAdam:
    """Shaped like DeepSpeed's CPUAdamBuilder: three sources, an include folder, -fopenmp."""

    NAME = "wheel_cpu_adam"

    def sources(self):
        return [os.path.join(inputs, "deepspeed_ops", f) for f in ("adam_kernels.cpp", "adam_registry.cpp", "bindings.cpp")]

    def include_paths(self):
        return [os.path.join(inputs, "deepspeed_ops", "include")]

    def cxx_args(self):
        return ["-O3", "-g", "-Wno-reorder", "-march=native", "-fopenmp", ""]


@step("kiln.deepspeed.load_builder of a DeepSpeed-style op (-fopenmp), stepped against torch.optim.AdamW")
def _():
    op = kiln.deepspeed.load_builder(DeepSpeedStyleAdam())
    n, lr, betas, eps, wd = 1000, 1e-2, (0.9, 0.999), 1e-8, 0.05
    gen = torch.Generator().manual_seed(0)
    start, grads = torch.randn(n, generator=gen), [torch.randn(n, generator=gen) for _ in range(3)]
    ref = start.clone().requires_grad_(True)
    ref_opt = torch.optim.AdamW([ref], lr=lr, betas=betas, eps=eps, weight_decay=wd)
    params, m, v = start.clone(), torch.zeros(n), torch.zeros(n)
    op.create_adam(1, lr, betas[0], betas[1], eps, wd, True)
    for i, g in enumerate(grads, start=1):
        ref.grad = g.clone()
        ref_opt.step()
        op.adam_update(1, i, lr, params, g.clone(), m, v)
    assert torch.allclose(params, ref.detach(), atol=1e-5), (params - ref.detach()).abs().max()


@step("`kiln warm` (the wheel's kiln program)")
def _():
    done = subprocess.run(["kiln", "warm", "--json"], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    import json

    report = json.loads(done.stdout)
    rows = report if isinstance(report, list) else report.get("results", report.get("pairs", []))
    return f"{len(rows)} op/target pairs" if rows else done.stdout[-200:]


HIT_CHILD = r"""
import torch, kiln
n = 1000
a, b, out = torch.rand(n), torch.rand(n), torch.empty(n)
kiln.op("vector_add")(a, b, out, n, grid=kiln.cdiv(n, 256), block=256)
assert torch.equal(out, a + b)
maps = open("/proc/self/maps").read()
assert "libkiln_jit_clang" not in maps, "a hit mapped the compiler"
print("hit, and the toolchain library was never mapped")
"""


@step("a cache hit in a fresh process maps no compiler")
def _():
    done = subprocess.run([sys.executable, "-c", HIT_CHILD], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout.strip()


@step("the same Triton kernels compiled again after kiln's compiles, to the same cubins")
def _():
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-after-")
    after = triton_kernels()
    assert after == before, "Triton's output changed after kiln's LLVM was loaded"
    return f"{len(after)} cubins"


# Debian's torch pulls in mesa's libLLVM-15 (through OpenCV). Loaded with its symbols global, the
# worst case for a library with an LLVM inside, it must neither bind to kiln's nor be bound by it.
# In a process of its own: Triton's libtriton.so exports its LLVM's symbols, and with a global
# libLLVM-15 loaded Triton's own compile crashes (seen here), so the two cannot share a process.
SYSTEM_LLVM_CHILD = r"""
import ctypes, glob, os, sys, torch
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import kiln
n = 4096
x, out = torch.randn(n), torch.empty(n)
gelu = kiln.op("gelu")
gelu(x, out, n, grid=kiln.cdiv(n, 256), block=256)
ref = torch.nn.functional.gelu(x, approximate="tanh")
assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
print("compiled and ran with", sys.argv[1], "loaded globally")
"""


@step("a kiln compile in a process where a system libLLVM is loaded globally")
def _():
    system_llvm = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libLLVM-*.so.1"))
    if not system_llvm:
        return "no system libLLVM in this root: nothing to load"
    env = dict(os.environ, KILN_CACHE_DIR=tempfile.mkdtemp(prefix="kiln-cache-system-llvm-"))
    done = subprocess.run([sys.executable, "-c", SYSTEM_LLVM_CHILD, system_llvm[0]], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout.strip()


print(f"wheel-test: {len(steps)} passed, 0 failed", flush=True)
