"""DeepSpeed's own CUDA op builders through kiln.deepspeed.load_builder, with the flags DeepSpeed
passes on a GPU machine (build_for_cpu false: DeepSpeed's jit_load sets it from
torch.cuda.is_available(), which the child process answers True; nothing is launched) and
TORCH_CUDA_ARCH_LIST=9.0. The sources are the installed DeepSpeed package's own
(deepspeed/ops/csrc), read at test time.

In CI: FusedAdam, the quantizer (whose PTX nvJitLink's ptxas refused before kiln defined nvcc's
__CUDACC_VER_MAJOR__ for Clang) and the training transformer, built cold in one child process,
their modules imported and DeepSpeed's functions found in them. Every builder DeepSpeed's own
path builds on this machine: KILN_DEEPSPEED_ALL=1 (the slower suite, ~10 minutes here).

Needs DeepSpeed and a torch built with CUDA (the venv's torch 2.x); under Debian's torch 1.13,
which has neither, it skips saying so. Running the ops needs a GPU and is not done here.
"""
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="the DeepSpeed CUDA builder tests need torch")
pytest.importorskip("kiln.torch", reason="kiln's Python package is not built (PYTHONPATH=<build>/python)")

from conftest import run_python  # noqa: E402

TORCH_CUDA = getattr(torch.version, "cuda", None)


def _deepspeed_reason():
    try:
        import deepspeed  # noqa: F401
    except Exception as e:  # ImportError, or DeepSpeed failing against this torch
        return "DeepSpeed cannot be imported with torch %s: %r" % (torch.__version__, e)
    if not TORCH_CUDA:
        return "torch %s has no CUDA (torch.version.cuda is None)" % torch.__version__
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    if not os.path.isfile(os.path.join(home, "include", "cuda.h")):
        return "no CUDA toolkit at %s" % home
    return None


needs_deepspeed_cuda = pytest.mark.skipif(_deepspeed_reason() is not None, reason=str(_deepspeed_reason()))

# DeepSpeed's CUDA accelerator's builder class names, and a function each module must expose (from
# DeepSpeed's own bindings).
CI_BUILDERS = [("FusedAdamBuilder", "multi_tensor_adam"), ("QuantizerBuilder", "quantize"),
               ("TransformerBuilder", "forward_fp32")]
# The rest of the 23 that DeepSpeed's own path builds here (None: any function of its bindings).
# Left out: those that need what this machine lacks: AsyncIOBuilder (libaio), GDSBuilder (cuFile),
# EvoformerAttnBuilder (CUTLASS), InferenceCutlassBuilder and RaggedOpsBuilder (the dskernels
# package: "No module named 'dskernels'" before anything compiles); and FPQuantizerBuilder (its
# source redeclares a template parameter: nvcc 13.0 refuses it too).
MORE_BUILDERS = [(c, None) for c in [
    "CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder", "FusedLambBuilder", "FusedLionBuilder", "RandomLTDBuilder",
    "InferenceCoreBuilder", "InferenceBuilder", "StochasticTransformerBuilder", "SpatialInferenceBuilder",
    "RaggedUtilsBuilder", "PinMemoryBuilder", "DeepCompileBuilder", "UtilsBuilder"]]

CHILD = r"""
import importlib, json, sys, time
import torch
torch.cuda.is_available = lambda: True  # DeepSpeed's GPU-machine flags; nothing is launched
import kiln.deepspeed as kds
from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator
cuda = CUDA_Accelerator()  # the builders DeepSpeed hands out on a GPU machine
report = []
for cls, function in json.loads(sys.argv[1]):
    builder = cuda.create_op_builder(cls)
    start = time.time()
    try:
        op = kds.load_builder(builder)
        names = [n for n in dir(op) if not n.startswith("_") and callable(getattr(op, n))]
        ok = function in names if function else bool(names)
        report.append(dict(builder=cls, ok=ok, seconds=round(time.time() - start, 1),
                           error="" if ok else "no %s in %s" % (function or "function", names)))
    except Exception as e:
        report.append(dict(builder=cls, ok=False, seconds=round(time.time() - start, 1), error=str(e)[-4000:]))
    print("BUILT " + json.dumps(report[-1]), flush=True)  # progress, for a run cut short
print("REPORT " + json.dumps(report))
"""


def _build(builders, tmp_path):
    env = {"TORCH_CUDA_ARCH_LIST": "9.0", "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    done = run_python("import sys; sys.argv = ['x', %r]\n%s" % (json.dumps(builders), CHILD), env=env, timeout=3000)
    line = [l for l in done.stdout.splitlines() if l.startswith("REPORT ")][-1]
    report = json.loads(line[len("REPORT "):])
    print("\nDeepSpeed builders through kiln.deepspeed.load_builder (TORCH_CUDA_ARCH_LIST=9.0, build_for_cpu false):")
    for r in report:
        print("  %-30s %-6s %6.1f s %s" % (r["builder"], "ok" if r["ok"] else "FAILED", r["seconds"], r["error"][:300]))
    failed = [r for r in report if not r["ok"]]
    assert not failed, "\n\n".join("%s: %s" % (r["builder"], r["error"]) for r in failed)


@needs_deepspeed_cuda
def test_fused_adam_quantizer_and_transformer_build_with_gpu_flags(tmp_path):
    _build(CI_BUILDERS, tmp_path)


@needs_deepspeed_cuda
@pytest.mark.skipif(os.environ.get("KILN_DEEPSPEED_ALL") != "1", reason="the slower suite: set KILN_DEEPSPEED_ALL=1")
def test_every_builder_deepspeed_builds_here_builds_through_kiln(tmp_path):
    _build(MORE_BUILDERS, tmp_path)


@needs_deepspeed_cuda
def test_dc_builder_paths_need_torch_utils_cpp_extension_imported():
    """DeepCompileBuilder.include_paths() reads torch.utils.cpp_extension.CUDA_HOME after a bare
    `import torch`; DeepSpeed's jit_load imports that submodule first, and so does kiln's."""
    code = """
        import sys, torch
        torch.cuda.is_available = lambda: True
        assert "torch.utils.cpp_extension" not in sys.modules
        import kiln.deepspeed as kds
        from deepspeed.ops.op_builder.dc import DeepCompileBuilder
        seen = {}
        def fake_load(**kwargs):
            seen.update(kwargs)
            raise SystemExit(0)
        import kiln.torch
        kiln.torch.load = fake_load
        try:
            kds.load_builder(DeepCompileBuilder())
        except SystemExit:
            pass
        print("INCLUDES", [p for p in seen["extra_include_paths"] if p.endswith("include")])
    """
    done = run_python(code, env={"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert "INCLUDES" in done.stdout, done.stdout + done.stderr
