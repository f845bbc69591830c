"""kiln's own ops from Python: kiln.op on torch tensors and NumPy arrays, arguments checked
against the spec (count, dtype, device, contiguity, writability), compile errors with their
diagnostics; results checked against torch's and NumPy's own computation."""
import os

import numpy as np
import pytest

import kiln

from conftest import run_python


def test_vector_add_on_numpy_arrays():
    n = 10007
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    out = np.zeros(n, dtype=np.float32)
    add = kiln.op("vector_add")
    add(a, b, out, n, grid=kiln.cdiv(n, 256), block=256)
    assert np.array_equal(out, a + b)
    assert add.cache_source in ("compiled", "disk", "memory")
    assert add.params() == [("const float*", "a"), ("const float*", "b"), ("float*", "out"), ("int64_t", "n")]


def test_adamw_on_torch_tensors_matches_torch_optim():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    n = 50000
    param = torch.randn(n)
    grad = torch.randn(n)
    ref = param.clone().requires_grad_(True)
    opt = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    m, v = torch.zeros(n), torch.zeros(n)
    adamw = kiln.op("adamw")
    block = 4096
    for step in (1, 2, 3):
        ref.grad = grad.clone()
        opt.step()
        adamw(param, grad, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.01, step, n, grid=kiln.cdiv(n, block), block=block)
    assert torch.allclose(param, ref.detach(), rtol=1e-5, atol=1e-6)


def test_adamw_two_groups_with_other_betas_at_the_same_step_each_match_torch():
    # Each CPU worker keeps the last launch's bias corrections (keyed by beta1, beta2, step):
    # two parameter groups stepped in turn at the same step number but with other betas must
    # not reuse each other's.
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    n, block = 40000, 4096
    adamw = kiln.op("adamw")
    groups = []
    for betas in ((0.9, 0.999), (0.8, 0.99)):
        param, grad = torch.randn(n), torch.randn(n)
        ref = param.clone().requires_grad_(True)
        opt = torch.optim.AdamW([ref], lr=1e-2, betas=betas, eps=1e-8, weight_decay=0.01)
        groups.append((betas, param, grad, torch.zeros(n), torch.zeros(n), ref, opt))
    for step in (1, 2, 3, 4):
        for betas, param, grad, m, v, ref, opt in groups:
            ref.grad = grad.clone()
            opt.step()
            adamw(param, grad, m, v, 1e-2, betas[0], betas[1], 1e-8, 0.01, step, n, grid=kiln.cdiv(n, block), block=block)
    for betas, param, grad, m, v, ref, opt in groups:
        assert torch.allclose(param, ref.detach(), rtol=1e-5, atol=1e-6), betas


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: kiln's CPU pool has no helper threads to start")
def test_a_cpu_op_called_from_torch_runs_on_torchs_openmp_threads_not_new_ones():
    # A synchronous call on the CPU runs on the caller's OpenMP team (torch's, spinning after
    # its last op) rather than waking threads of kiln's own that would share the cores with it
    # (docs/history/2026-12-04-cpu-adamw-openmp.md). Seen from outside: no thread is started.
    pytest.importorskip("torch")
    code = """
        import os, sys, torch, kiln
        torch.set_num_threads(2)
        x = torch.randn(1 << 18)
        torch.add(x, x)                      # torch's team of 2 exists
        n, block = 1 << 16, 4096
        p, g, m, v = torch.randn(n), torch.randn(n), torch.zeros(n), torch.zeros(n)
        adamw = kiln.op("adamw")
        adamw(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, n, grid=1, block=block)  # loads it; one block runs on the caller
        before = set(os.listdir("/proc/self/task"))
        for step in range(2, 6):
            adamw(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, step, n, grid=n // block, block=block)
        print(len(set(os.listdir("/proc/self/task")) - before))
    """
    assert run_python(code).stdout.split()[-1] == "0"
    # KILN_CPU_OPENMP=0 keeps kiln's own threads: the check above would see them start.
    assert int(run_python(code, env={"KILN_CPU_OPENMP": "0"}).stdout.split()[-1]) >= 1


def test_gelu_on_torch_tensors_matches_torch():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 4096)
    y = torch.empty_like(x)
    kiln.op("gelu")(x, y, x.numel(), grid=kiln.cdiv(x.numel(), 4096), block=4096)
    assert torch.allclose(y, torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-5) or \
        torch.allclose(y, torch.nn.functional.gelu(x), atol=1e-5)


def test_gelu_bf16_of_every_bfloat16_matches_torch_and_is_the_same_each_call():
    # The CPU version looks its results up in a table of all 65536 that its first launch makes
    # (blocks running while it is made compute their own): every input, first launch and later.
    torch = pytest.importorskip("torch")
    x = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).contiguous()
    gelu = kiln.op("gelu_bf16")
    first, second = torch.empty_like(x), torch.empty_like(x)
    gelu(x, first, x.numel(), grid=kiln.cdiv(x.numel(), 4096), block=4096)
    gelu(x, second, x.numel(), grid=kiln.cdiv(x.numel(), 4096), block=4096)
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))
    ref = torch.nn.functional.gelu(x.double(), approximate="tanh")
    finite = torch.isfinite(x)
    assert torch.allclose(first[finite].double(), ref[finite], rtol=8e-3, atol=1e-3)  # the spec's [check] tolerances
    assert torch.isnan(first[torch.isnan(x)]).all()


def test_wrong_arguments_raise_naming_the_op_and_the_parameter():
    torch = pytest.importorskip("torch")
    add = kiln.op("vector_add")
    a = torch.ones(8)
    with pytest.raises(kiln.KilnError, match="op vector_add, entry vector_add takes 4 arguments"):
        add(a, a, a, grid=1)
    with pytest.raises(kiln.KilnError, match="parameter 2 'const float\\* b' points to float32; the tensor is float64") as e:
        add(a, a.double(), a, 8, grid=1)
    assert e.value.code == "invalid_argument"
    with pytest.raises(kiln.KilnError, match="parameter 1 .* needs a contiguous tensor"):
        add(torch.ones(8, 2).t(), a, a, 8, grid=1)
    with pytest.raises(kiln.KilnError, match="parameter 4 'int64_t n' takes int64_t; the argument is a float"):
        add(a, a, a, 8.0, grid=1)
    readonly = np.ones(8, dtype=np.float32)
    readonly.setflags(write=False)
    with pytest.raises(kiln.KilnError, match="parameter 3 'float\\* out' is written by the kernel; the array is read-only"):
        add(readonly, readonly, readonly, 8, grid=1)
    with pytest.raises(kiln.KilnError, match="parameter 1 .* is a pointer; the argument is a str"):
        add("a", a, a, 8, grid=1)
    with pytest.raises(kiln.KilnError, match="no op named 'no_such_op': no no_such_op.toml in") as e:
        kiln.op("no_such_op")
    assert e.value.code == "not_found"


def test_cuda_tensors_on_a_cpu_context_are_refused():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: a CUDA tensor cannot be made")
    a = torch.ones(8, device="cuda")
    with pytest.raises(kiln.KilnError, match="gets a CUDA tensor"):
        kiln.context("cpu").op("vector_add")(a, a, a, 8, grid=1)


def test_kiln_op_runs_where_its_tensors_are():
    """kiln.op dispatches on its arguments' device: host arrays on the CPU accelerator whatever
    the best accelerator here is, CUDA tensors on CUDA (where there is one)."""
    n = 1000
    a, b, out = np.ones(n, np.float32), np.full(n, 2, np.float32), np.zeros(n, np.float32)
    add = kiln.op("vector_add")
    add(a, b, out, n, grid=kiln.cdiv(n, 256), block=256)
    assert np.all(out == 3) and add.target.startswith("cpu:")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the CUDA half of this test needs one")
    x, y, z = torch.ones(n, device="cuda"), torch.full((n,), 2.0, device="cuda"), torch.zeros(n, device="cuda")
    add(x, y, z, n, grid=kiln.cdiv(n, 256), block=256)
    assert torch.all(z == 3).item() and add.target.startswith("cuda:")


SPEC = """
name = "py_scale"
language = "cpp"
sources = ["scale.cpp"]
[[entry]]
name = "scale"
params = ["float* x", "float s", "int64_t n"]
"""


def test_op_from_spec_text_and_its_compile_errors(tmp_path):
    (tmp_path / "scale.cpp").write_text(
        '#include <kiln/cpu_kernel.h>\n'
        'void scale(const kiln::cpu::Block& b, float* x, float s, int64_t n) {\n'
        '  for (int64_t i = kiln::cpu::first_thread(b); i < n && i < int64_t(kiln::cpu::first_thread(b) + kiln::cpu::threads_per_block(b)); ++i)\n'
        '    x[i] *= s;\n}\n')
    op = kiln.op_from_spec(SPEC, str(tmp_path))
    x = np.arange(100, dtype=np.float32)
    op(x, 0.5, 100, grid=1, block=100)
    assert np.array_equal(x, np.arange(100, dtype=np.float32) * 0.5)

    (tmp_path / "scale.cpp").write_text((tmp_path / "scale.cpp").read_text().replace("x[i] *= s;", "x[i] *= missing;"))
    with pytest.raises(kiln.KilnError) as e:
        # The CPU's build, named: on a GPU machine the best accelerator is CUDA, and this spec has
        # no CUDA version (building it there is 'unavailable', not a compile error).
        kiln.context("cpu").op_from_spec(SPEC, str(tmp_path)).build()
    assert e.value.code == "compile_error"
    d = [d for d in e.value.diagnostics if d["severity"] == "error"][0]
    assert d["file"].endswith("scale.cpp") and d["line"] == 4 and "missing" in d["message"], e.value.diagnostics


def test_a_fresh_process_finds_the_op_in_the_cache():
    code = """
        import kiln, numpy as np
        op = kiln.op("vector_add").build()
        print(op.cache_source)
    """
    run_python(code)
    assert run_python(code).stdout.strip() == "disk"


def test_importing_kiln_loads_no_compiler_and_no_torch():
    done = run_python("""
        import sys, kiln
        kiln.op("vector_add").build()   # a hit (the test before made it)
        maps = open("/proc/self/maps").read()
        print("torch" in sys.modules, "libLLVM" in maps or "libclang-cpp" in maps)
    """)
    assert done.stdout.split() == ["False", "False"], done.stdout
