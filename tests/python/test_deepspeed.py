"""kiln.deepspeed: DeepSpeed-shaped op builders built by kiln.torch.load.

The ops under deepspeed_ops/ are written the way DeepSpeed writes its CPU ops (several sources,
an include folder, AVX2/AVX-512 intrinsics behind -D__AVX512__/-D__AVX256__, a templated step,
bindings in a source of their own, -O3 -march=native -fopenmp) and are checked against torch's
own optimizers. The tests with real DeepSpeed skip, saying why, where it cannot be imported
(Debian's torch 1.13 has none).

Every real compile here is the same op with the same flags, so a run compiles it once (and once
more for DeepSpeed's own cpu_adam); the rest are memo or store hits, or fake loaders that only
check what kiln.torch.load was asked.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the kiln.deepspeed tests need torch")
kiln_torch = pytest.importorskip(
    "kiln.torch", reason="kiln's Python package is not built (PYTHONPATH=<build>/python)")
import kiln.deepspeed as kds  # noqa: E402

OPS = Path(__file__).resolve().parent / "deepspeed_ops"


def _deepspeed_or_reason():
    try:
        import deepspeed  # noqa: F401
    except Exception as e:  # ImportError, or DeepSpeed failing against this torch
        return None, f"DeepSpeed cannot be imported with torch {torch.__version__}: {e!r}"
    return deepspeed, None


def needs_deepspeed():
    _, reason = _deepspeed_or_reason()
    if reason:
        pytest.skip(reason)


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _expected_isa():
    flags = _cpu_flags()
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx256"
    return "scalar"


# ----------------------------------------------------------------------------------------------
# Builders of our own, with DeepSpeed's method names


class TestOpBuilderBase:
    """Shaped like DeepSpeed's OpBuilder (its method names and behaviour), written here."""

    __test__ = False  # not a pytest class
    NAME = None
    BUILD_VAR = None

    def __init__(self):
        self.name = self.NAME
        self.jit_mode = False
        self.error_log = None

    def absolute_name(self):
        return f"kiln_tests.deepspeed_ops.{self.NAME}_op"

    def sources(self):
        return []

    def include_paths(self):
        return []

    def cxx_args(self):
        return []

    def extra_ldflags(self):
        return []

    def is_compatible(self, verbose=False):
        return True

    def strip_empty_entries(self, args):
        return [a for a in args if len(a) > 0]

    def deepspeed_src_path(self, code_path):
        return code_path if os.path.isabs(code_path) else str(OPS / code_path)

    def simd_width(self):
        return {"avx512": "-D__AVX512__", "avx256": "-D__AVX256__"}.get(_expected_isa(),
                                                                          "-D__SCALAR__")

    def load(self, verbose=False):
        return kds.load_builder(self, verbose)


class KilnTestAdamBuilder(TestOpBuilderBase):
    NAME = "kiln_test_cpu_adam"
    BUILD_VAR = "KILN_BUILD_TEST_CPU_ADAM"

    def sources(self):
        return ["adam_kernels.cpp", "adam_registry.cpp", "bindings.cpp"]

    def include_paths(self):
        return ["include"]

    def cxx_args(self):
        # What DeepSpeed's CPU builders pass, in their order (so that this op and DeepSpeed's
        # cpu_adam share one torch/extension.h header artifact); the empty entry stands for one
        # a builder's helper returned, and must be stripped.
        return ["-O3", "-g", "-Wno-reorder", "-march=native", "-fopenmp", self.simd_width(), ""]


class IncompatibleBuilder(TestOpBuilderBase):
    NAME = "kiln_test_incompatible"

    def sources(self):
        return ["does_not_exist.cpp"]

    def is_compatible(self, verbose=False):
        self.error_log = "needs libfrobnicate, which is not installed"
        return False


class RelativeBuilder:
    """Builder-shaped with the least DeepSpeed offers: no deepspeed_src_path, no
    strip_empty_entries, no is_compatible; relative paths resolve against this file's folder."""

    NAME = "kiln_test_relative"

    def sources(self):
        return ["deepspeed_ops/adam_kernels.cpp", "", str(OPS / "bindings.cpp")]

    def include_paths(self):
        return ["deepspeed_ops/include"]

    def cxx_args(self):
        return ["-O2", "", "-DKILN_TEST=1"]

    def extra_ldflags(self):
        return ["", "-lm"]


class FakeModule:

    def __init__(self, name):
        self.__name__ = name


@pytest.fixture
def fake_loader(monkeypatch):
    """kiln.torch.load replaced by a recorder returning a fake module: checks what kiln.deepspeed
    asks for, compiling nothing."""
    calls = []

    def load(**kwargs):
        calls.append(kwargs)
        return FakeModule(kwargs["name"])

    monkeypatch.setattr(kiln_torch, "load", load)
    return calls


@pytest.fixture
def kiln_spy(monkeypatch):
    """Records the calls that reach kiln.torch.load, and makes torch's own cpp_extension.load
    fail: what is built here is built by kiln."""
    calls = []
    real = kiln_torch.load

    def load(*args, **kwargs):
        calls.append(kwargs.get("name", args[0] if args else None))
        return real(*args, **kwargs)

    def torch_load(*args, **kwargs):
        raise AssertionError("torch.utils.cpp_extension.load was called: the build bypassed kiln")

    import torch.utils.cpp_extension as cpp_extension

    monkeypatch.setattr(kiln_torch, "load", load)
    monkeypatch.setattr(cpp_extension, "load", torch_load)
    return calls


def _child_env():
    """This process's environment, with its import path: a child finds the same kiln."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    return env


def _assert_not_torch_built(module):
    """A module torch's cpp_extension built lives in its extensions folder; kiln's does not."""
    path = getattr(module, "__file__", None)
    assert path, f"{module!r} has no __file__"
    from torch.utils.cpp_extension import get_default_build_root

    torch_dir = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    assert not os.path.realpath(path).startswith(os.path.realpath(torch_dir) + os.sep), (
        f"{module.__name__} was loaded from torch's extension folder {path}")


# ----------------------------------------------------------------------------------------------
# load_builder with our own builders


def _run_adam(op, adamw, n, steps=4, lr=1e-2, weight_decay=0.05, seed=0):
    """Steps our op and torch's optimizer on the same tensors; returns both parameters."""
    gen = torch.Generator().manual_seed(seed + n)
    start = torch.randn(n, generator=gen)
    grads = [torch.randn(n, generator=gen) for _ in range(steps)]
    betas, eps = (0.9, 0.999), 1e-8

    ref = start.clone().requires_grad_(True)
    cls = torch.optim.AdamW if adamw else torch.optim.Adam
    ref_opt = cls([ref], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    params = start.clone()
    exp_avg = torch.zeros(n)
    exp_avg_sq = torch.zeros(n)
    opt_id = 7 if adamw else 8
    op.create_adam(opt_id, lr, betas[0], betas[1], eps, weight_decay, adamw)
    try:
        for step, g in enumerate(grads, start=1):
            ref.grad = g.clone()
            ref_opt.step()
            op.adam_update(opt_id, step, lr, params, g.clone(), exp_avg, exp_avg_sq)
    finally:
        op.destroy_adam(opt_id)
    return params, ref.detach()


def test_adam_builder_builds_through_kiln_and_matches_torch(kiln_spy):
    op = kds.load_builder(KilnTestAdamBuilder())
    assert kiln_spy == [KilnTestAdamBuilder.NAME] or kiln_spy == [], kiln_spy
    _assert_not_torch_built(op)
    assert op.simd_isa() == _expected_isa()
    # Sizes that exercise the 8-, 4- and 1-register tiles and the scalar tail.
    for n in (4099, 37, 1):
        for adamw in (True, False):
            ours, ref = _run_adam(op, adamw, n)
            torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6,
                                       msg=f"n={n} adamw={adamw}")
    assert op.registry_size() == 0


def test_adam_op_checks_its_tensors():
    op = kds.load_builder(KilnTestAdamBuilder())
    op.create_adam(3, 1e-3, 0.9, 0.999, 1e-8, 0.0, True)
    try:
        p = torch.zeros(8)
        with pytest.raises(RuntimeError, match="exp_avg has 4 elements"):
            op.adam_update(3, 1, 1e-3, p, torch.zeros(8), torch.zeros(4), torch.zeros(8))
        with pytest.raises(RuntimeError, match="no optimizer with id 99"):
            op.adam_update(99, 1, 1e-3, p, torch.zeros(8), torch.zeros(8), torch.zeros(8))
    finally:
        op.destroy_adam(3)


def test_load_is_memoised_per_op_name(kiln_spy):
    first = kds.load_builder(KilnTestAdamBuilder())
    kiln_spy.clear()
    assert kds.load_builder(KilnTestAdamBuilder()) is first  # a new builder object, same name
    assert KilnTestAdamBuilder().load() is first
    assert kds.KilnBuilder(KilnTestAdamBuilder()).load() is first
    assert kds.kiln_builder_class(KilnTestAdamBuilder)().load() is first
    assert kiln_spy == []
    # jit_load always builds, as DeepSpeed's does; loading a name again with the same inputs
    # gives the same module (torch's contract, kept by kiln.torch.load).
    assert kds.kiln_builder_class(KilnTestAdamBuilder)().jit_load(verbose=False) is first
    assert kiln_spy == [KilnTestAdamBuilder.NAME]


def test_what_kiln_torch_load_is_asked_for(fake_loader):
    builder = KilnTestAdamBuilder()
    builder.NAME = builder.name = "kiln_test_args"
    kds.load_builder(builder)
    (call, ) = fake_loader
    assert call["name"] == "kiln_test_args"
    assert call["sources"] == [str(OPS / s) for s in builder.sources()]
    assert call["extra_include_paths"] == [str(OPS / "include")]
    assert "" not in call["extra_cflags"]
    assert call["extra_cflags"][:5] == ["-O3", "-g", "-Wno-reorder", "-march=native", "-fopenmp"]
    assert call["extra_cflags"][-1] == "-UC10_USE_GLOG"  # as DeepSpeed's jit_load adds it
    assert call["with_cuda"] is None and call["verbose"] is False


def test_relative_paths_resolve_like_deepspeed_src_path(fake_loader):
    kds.load_builder(RelativeBuilder(), verbose=True)
    (call, ) = fake_loader
    here = Path(__file__).resolve().parent
    assert call["sources"] == [str(here / "deepspeed_ops/adam_kernels.cpp"),
                               str(OPS / "bindings.cpp")]
    assert call["extra_include_paths"] == [str(here / "deepspeed_ops/include")]
    assert call["extra_cflags"] == ["-O2", "-DKILN_TEST=1", "-UC10_USE_GLOG"]
    assert call["extra_ldflags"] == ["-lm"]
    assert call["verbose"] is True
    for path in call["sources"] + call["extra_include_paths"]:
        assert os.path.exists(path), path


def test_incompatible_builder_is_a_clear_error(fake_loader):
    with pytest.raises(RuntimeError) as err:
        kds.load_builder(IncompatibleBuilder())
    message = str(err.value)
    for part in ("kiln_test_incompatible", "IncompatibleBuilder", "is_compatible",
                 "needs libfrobnicate"):
        assert part in message, message
    assert fake_loader == []
    with pytest.raises(RuntimeError, match="IncompatibleBuilder"):
        kds.KilnBuilder(IncompatibleBuilder()).load()


def test_a_builder_with_no_name_is_refused():
    with pytest.raises(TypeError, match="neither a 'name' nor a 'NAME'"):
        kds.load_builder(object())


def test_importing_kiln_deepspeed_imports_neither_torch_nor_deepspeed():
    code = ("import sys, kiln.deepspeed; "
            "print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_child_env(), check=True).stdout
    assert out.strip() == "[]", out


# ----------------------------------------------------------------------------------------------
# The accelerator


def test_accelerator_hands_out_kiln_builders(fake_loader):
    class KilnTestAccelBuilder(KilnTestAdamBuilder):
        NAME = "kiln_test_accel"

    acc = kds.accelerator(builders=[KilnTestAccelBuilder])
    assert acc._name == "cpu"
    assert acc.device_name() == "cpu"
    assert acc.communication_backend_name() in ("gloo", "ccl")
    assert acc.op_builder_dir().endswith("op_builder.cpu")
    cls = acc.get_op_builder("KilnTestAccelBuilder")
    assert issubclass(cls, KilnTestAccelBuilder) and cls.__name__ == "KilnTestAccelBuilder"
    builder = acc.create_op_builder("KilnTestAccelBuilder")
    assert isinstance(builder, KilnTestAccelBuilder)
    module = builder.load()
    assert [c["name"] for c in fake_loader] == ["kiln_test_accel"]
    assert acc.create_op_builder("KilnTestAccelBuilder").load() is module
    assert kds.load_builder(KilnTestAccelBuilder()) is module


def test_accelerator_is_a_deepspeed_accelerator():
    needs_deepspeed()
    from deepspeed.accelerator import get_accelerator, set_accelerator
    from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator
    from deepspeed.ops.op_builder.cpu import CPUAdamBuilder, NotImplementedBuilder

    acc = kds.accelerator()
    assert isinstance(acc, DeepSpeedAccelerator) and isinstance(acc, CPU_Accelerator)
    assert acc._name == "cpu" and acc.op_builder_dir() == "deepspeed.ops.op_builder.cpu"
    assert acc.is_available() and acc.total_memory() > 0  # DeepSpeed's own methods
    previous = get_accelerator()
    set_accelerator(acc)  # asserts isinstance(acc, DeepSpeedAccelerator)
    try:
        assert get_accelerator() is acc
    finally:
        set_accelerator(previous)

    adam = acc.create_op_builder("CPUAdamBuilder")
    assert isinstance(adam, CPUAdamBuilder) and adam.name == "cpu_adam"
    assert acc.get_op_builder("CPUAdamBuilder") is type(adam)
    # DeepSpeed's NotImplementedBuilder overrides load() to raise: kept.
    missing = acc.create_op_builder("NoSuchBuilder")
    assert isinstance(missing, NotImplementedBuilder)
    with pytest.raises(ValueError, match="not been implemented"):
        missing.load()


def test_deepspeed_load_overrides_reach_kiln(fake_loader, monkeypatch):
    """PinMemoryBuilder.load calls super(type(builder), builder).load(): with a plain subclass
    that recurses forever; kiln's routed class puts its own load right after the subclass."""
    needs_deepspeed()
    from deepspeed.ops.op_builder.builder import OpBuilder
    from deepspeed.ops.op_builder.cpu import PinMemoryBuilder

    monkeypatch.delitem(OpBuilder._loaded_ops, "pin_memory", raising=False)
    monkeypatch.delattr(sys, "_deepspeed_pin_memory_op_module", raising=False)
    try:
        module = kds.KilnBuilder(PinMemoryBuilder()).load()
        assert isinstance(module, FakeModule)
        assert [c["name"] for c in fake_loader] == ["pin_memory"]
        assert all(os.path.isfile(s) for s in fake_loader[0]["sources"])
    finally:
        OpBuilder._loaded_ops.pop("pin_memory", None)
        if hasattr(sys, "_deepspeed_pin_memory_op_module"):
            del sys._deepspeed_pin_memory_op_module


# ----------------------------------------------------------------------------------------------
# install(): DeepSpeed's own DeepSpeedCPUAdam


def _deepspeed_adam_vs_torch(adamw_mode, n=1031, steps=3):
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    gen = torch.Generator().manual_seed(n)
    start = torch.randn(n, generator=gen)
    grads = [torch.randn(n, generator=gen) for _ in range(steps)]
    ours = torch.nn.Parameter(start.clone())
    ref = torch.nn.Parameter(start.clone())
    kwargs = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
    opt = DeepSpeedCPUAdam([ours], adamw_mode=adamw_mode, **kwargs)
    ref_opt = (torch.optim.AdamW if adamw_mode else torch.optim.Adam)([ref], **kwargs)
    for g in grads:
        ours.grad = g.clone()
        ref.grad = g.clone()
        opt.step()
        ref_opt.step()
    return opt, ours.detach(), ref.detach()


def test_install_routes_deepspeed_cpu_adam_through_kiln(kiln_spy, monkeypatch):
    needs_deepspeed()
    import deepspeed  # noqa: F401  (imported before install(): the names are already bound)
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder import CPUAdamBuilder
    from deepspeed.ops.op_builder.builder import OpBuilder

    assert not getattr(CPUAdamBuilder, "_kiln_routed", False)  # bound before install()
    monkeypatch.setattr(OpBuilder, "_loaded_ops", {})  # this test's cpu_adam is its own
    acc = kds.install(fallback=False)  # kiln builds it or the test fails
    try:
        assert kds.installed() and get_accelerator() is acc
        assert kds.install() is acc  # idempotent
        for adamw_mode in (True, False):
            opt, ours, ref = _deepspeed_adam_vs_torch(adamw_mode)
            torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6,
                                       msg=f"adamw_mode={adamw_mode}")
        assert kiln_spy == ["cpu_adam"]  # built once, by kiln, then memoised
        _assert_not_torch_built(opt.ds_opt_adam)
        assert OpBuilder._loaded_ops["cpu_adam"] is opt.ds_opt_adam
        # A builder asked of the accelerator now is kiln's, and finds the same module.
        assert acc.create_op_builder("CPUAdamBuilder").load() is opt.ds_opt_adam
        del opt
    finally:
        kds.uninstall()
    assert not kds.installed() and get_accelerator() is not acc
    assert OpBuilder.__dict__["jit_load"].__module__ == "deepspeed.ops.op_builder.builder"


def test_install_before_import_deepspeed(tmp_path):
    """A fresh process: install() first, then DeepSpeed's DeepSpeedCPUAdam as a job uses it."""
    needs_deepspeed()
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        import kiln.deepspeed
        assert "deepspeed" not in sys.modules
        acc = kiln.deepspeed.install(fallback=False)

        import kiln.torch
        import torch
        import torch.utils.cpp_extension as cpp_extension
        def refuse(*a, **k):
            raise AssertionError("torch.utils.cpp_extension.load was called")
        cpp_extension.load = refuse

        from deepspeed.accelerator import get_accelerator
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.randn(515))
        r = torch.nn.Parameter(p.detach().clone())
        opt = DeepSpeedCPUAdam([p], lr=1e-2, weight_decay=0.01)
        ref = torch.optim.AdamW([r], lr=1e-2, weight_decay=0.01)
        for _ in range(3):
            g = torch.randn(515)
            p.grad, r.grad = g.clone(), g.clone()
            opt.step(); ref.step()
        print(json.dumps({
            "accelerator_is_kiln": get_accelerator() is acc,
            "max_diff": (p - r).abs().max().item(),
            "module_file": opt.ds_opt_adam.__file__,
        }))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=_child_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["accelerator_is_kiln"]
    assert result["max_diff"] < 1e-5, result
    assert "torch_extensions" not in result["module_file"], result


def test_install_falls_back_to_deepspeed_only_for_ops_kiln_refuses(monkeypatch):
    """An op kiln refuses (kiln.torch.load takes no CUDA sources today) is built by DeepSpeed's
    own loader, with a warning; a compile error is raised; fallback=False raises kiln's error."""
    needs_deepspeed()
    import torch.utils.cpp_extension as cpp_extension
    from deepspeed.ops.op_builder.builder import OpBuilder
    from kiln import KilnError

    class KilnTestRefusedBuilder(OpBuilder):
        NAME = "kiln_test_refused"

        def __init__(self):
            super().__init__(name=self.NAME)

        def absolute_name(self):
            return "kiln_tests.refused_op"

        def sources(self):
            return [str(OPS / "bindings.cpp")]

    def kiln_refuses(**kwargs):
        raise KilnError(f"extension '{kwargs['name']}': CUDA sources are not supported yet")

    def kiln_compile_error(**kwargs):
        error = KilnError(f"Error building extension '{kwargs['name']}': bindings.cpp:1: error")
        error.code = "compile_error"
        raise error

    torch_built = []

    def torch_load(**kwargs):
        torch_built.append(kwargs["name"])
        return FakeModule(kwargs["name"])

    monkeypatch.setattr(cpp_extension, "load", torch_load)
    monkeypatch.setattr(OpBuilder, "_loaded_ops", {})
    monkeypatch.setattr(kiln_torch, "load", kiln_refuses)
    kds.install()
    try:
        with pytest.warns(RuntimeWarning, match="kiln_test_refused.*CUDA sources are not"):
            module = KilnTestRefusedBuilder().load()
        assert torch_built == ["kiln_test_refused"]
        assert OpBuilder._loaded_ops["kiln_test_refused"] is module

        OpBuilder._loaded_ops.clear()
        monkeypatch.setattr(kiln_torch, "load", kiln_compile_error)
        with pytest.raises(KilnError, match="Error building extension"):
            KilnTestRefusedBuilder().load()
    finally:
        kds.uninstall()

    monkeypatch.setattr(kiln_torch, "load", kiln_refuses)
    kds.install(fallback=False)
    try:
        with pytest.raises(KilnError, match="CUDA sources are not supported"):
            KilnTestRefusedBuilder().load()
    finally:
        kds.uninstall()
    assert torch_built == ["kiln_test_refused"]
