"""kiln cc under the LLM serving stack's own JITs (docs/LLM-SERVING.md): FlashInfer's modules
through FLASHINFER_NVCC_LAUNCHER and FLASHINFER_CXX_LAUNCHER, and tvm-ffi's cpp.load_inline (SGLang's
jit_kernel path) and TileLang through a CUDA_HOME from `kiln cc --cuda-home`. Each runs on two nodes: separate
processes with their own kiln cache, their workspaces in different folders, sharing a real
redis-server. Compile-only here (CUDA 13, sm_90, no GPU): node 2 must compile nothing and still
load what node 1 built. The packages come from PyPI into the torch 2.x venv (scripts/setup);
under torch 1.13 they are not installed and the tests skip saying so.
"""
import json
import os
import subprocess
import time

import pytest

from conftest import run_python
from test_triton import kiln_cli as built_cli

NVCC = "/usr/local/cuda/bin/nvcc"


def kiln_cli():
    cli = built_cli()
    if not cli:
        pytest.skip("the kiln command is not built beside this kiln package (build/bin/kiln)")
    if not os.access(NVCC, os.X_OK):
        pytest.skip("no CUDA toolkit at /usr/local/cuda")
    return cli


def needs(module):
    try:
        __import__(module)
    except Exception as e:  # noqa: BLE001 (any failure to import is a reason to skip)
        pytest.skip("%s is not importable here (%s): scripts/setup installs it into the torch 2.x venv" % (module, e))


def stats(cli, cache):
    done = subprocess.run([cli, "--cache-dir", str(cache), "cache", "stats", "--json"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


FLASHINFER_NODE = """
import time
t = time.time()
from flashinfer.jit.activation import gen_act_and_mul_module
spec = gen_act_and_mul_module("silu")
spec.build()
module = spec.load()
print("ready %.1f s" % (time.time() - t))
"""


def test_flashinfer_modules_a_second_node_with_its_workspace_elsewhere_compiles_nothing(tmp_path, redis_url):
    needs("flashinfer")
    cli = kiln_cli()
    launcher = cli + " cc"
    nodes = {"node1": tmp_path / "node1", "node2": tmp_path / "somewhere" / "else" / "node2"}
    seconds = {}
    for name, base in nodes.items():
        env = {
            "FLASHINFER_WORKSPACE_BASE": str(base), "FLASHINFER_CUDA_ARCH_LIST": "9.0", "CUDA_HOME": "/usr/local/cuda",
            "PATH": "/usr/local/cuda/bin:" + os.environ["PATH"], "FLASHINFER_NVCC_LAUNCHER": launcher,
            "FLASHINFER_CXX_LAUNCHER": launcher, "KILN_CACHE_DIR": str(tmp_path / ("cache-" + name)),
            "KILN_REMOTE_CACHE": redis_url, "KILN_CC_BASEDIR": str(base),
        }
        start = time.time()
        done = run_python(FLASHINFER_NODE, env=env, timeout=1200)
        seconds[name] = time.time() - start
        assert "ready" in done.stdout, done.stdout + done.stderr
    one, two = stats(cli, tmp_path / "cache-node1"), stats(cli, tmp_path / "cache-node2")
    print("FlashInfer silu_and_mul module, sm_90: node 1 %.1f s (%d compiles), node 2 %.1f s (%d hits from Redis)"
          % (seconds["node1"], one["compiles"], seconds["node2"], two["hits_remote"]))
    assert one["compiles"] >= 1 and not one["cc_not_cached"], one
    assert two["compiles"] == 0, two
    assert two["hits_remote"] == one["compiles"], (one, two)
    assert not two["cc_not_cached"], two


TVM_FFI_NODE = r"""
import tvm_ffi.cpp
mod = tvm_ffi.cpp.load_inline(
    "kiln_scale",
    cuda_sources='''
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
__global__ void scale_kernel(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
void scale(tvm::ffi::TensorView x, float s) {
  int n = x.size(0);
  scale_kernel<<<(n + 255) / 256, 256>>>(static_cast<float*>(x.data_ptr()), s, n);
}
''', functions=["scale"], backend="cuda")
print("loaded", mod)
"""


def test_tvm_ffi_load_inline_through_a_cuda_home_of_kilns_compiles_once_for_two_nodes(tmp_path, redis_url):
    needs("tvm_ffi")
    cli = kiln_cli()
    home = subprocess.run([cli, "cc", "--cuda-home", str(tmp_path / "cuda-home"), "--toolkit", "/usr/local/cuda"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert home == str(tmp_path / "cuda-home")
    for name, workspace in (("node1", tmp_path / "node1" / "ffi"), ("node2", tmp_path / "else" / "where" / "node2" / "ffi")):
        env = {"CUDA_HOME": home, "TVM_FFI_CUDA_ARCH_LIST": "9.0", "TVM_FFI_CACHE_DIR": str(workspace),
               "KILN_CACHE_DIR": str(tmp_path / ("cache-" + name)), "KILN_REMOTE_CACHE": redis_url, "KILN_CC_BASEDIR": str(workspace)}
        done = run_python(TVM_FFI_NODE, env=env, timeout=600)
        assert "loaded" in done.stdout, done.stdout + done.stderr
    one, two = stats(cli, tmp_path / "cache-node1"), stats(cli, tmp_path / "cache-node2")
    assert one["compiles"] == 1, one
    assert two["compiles"] == 0 and two["hits_remote"] == 1, two


TILELANG_NODE = r"""
import time
t = time.time()
import tilelang
import tilelang.language as T

N, BLOCK = 4096, 128

@T.prim_func
def add(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
    with T.Kernel(T.ceildiv(N, BLOCK), threads=BLOCK) as bx:
        for i in T.Parallel(BLOCK):
            C[bx * BLOCK + i] = A[bx * BLOCK + i] * 2.0 + B[bx * BLOCK + i]

kernel = tilelang.compile(add, target={"kind": "cuda", "arch": "sm_90"}, execution_backend="tvm_ffi")
assert "__global__" in kernel.get_kernel_source()
print("ready %.1f s" % (time.time() - t))
"""


def test_tilelang_kernel_through_a_cuda_home_of_kilns_compiles_once_for_two_nodes(tmp_path, redis_url):
    needs("tilelang")
    cli = kiln_cli()
    home = subprocess.run([cli, "cc", "--cuda-home", str(tmp_path / "cuda-home"), "--toolkit", "/usr/local/cuda"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # TileLang reads a kernel's Python source back (inspect): the node's script is a file.
    script = tmp_path / "tilelang_node.py"
    script.write_text(TILELANG_NODE)
    seconds = {}
    for name in ("node1", "node2"):
        # TileLang writes each kernel's source into a fresh folder under TMPDIR (tvm_kernels.cu in
        # /tmp/tmpXXXX): the pattern base "TMPDIR/*" keys it by its name in that folder. Each node
        # has its own TileLang cache, so node 2 lowers again and asks nvcc again.
        tmp = tmp_path / name / "tmp"
        tmp.mkdir(parents=True)
        env = {"CUDA_HOME": home, "TMPDIR": str(tmp), "TILELANG_CACHE_DIR": str(tmp_path / name / "tilelang-cache"),
               "KILN_CACHE_DIR": str(tmp_path / ("cache-" + name)), "KILN_REMOTE_CACHE": redis_url,
               "KILN_CC_BASEDIR": str(tmp) + "/*"}
        start = time.time()
        done = run_python("import runpy; runpy.run_path(%r)" % str(script), env=env, timeout=600)
        seconds[name] = time.time() - start
        assert "ready" in done.stdout, done.stdout + done.stderr
    one, two = stats(cli, tmp_path / "cache-node1"), stats(cli, tmp_path / "cache-node2")
    print("TileLang add kernel, sm_90: node 1 %.1f s (%d compiles), node 2 %.1f s (%d hits from Redis)"
          % (seconds["node1"], one["compiles"], seconds["node2"], two["hits_remote"]))
    assert one["compiles"] == 1 and not one["cc_not_cached"], one
    assert two["compiles"] == 0 and two["hits_remote"] == 1, two
