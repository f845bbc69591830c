"""How a host library's CUDA source is compiled side by side (issue 40): its device pass split by
kernel into parts that are optimised and generated on threads of their own
(jit/clang/split_device.h), its host pass beside them, and every job of the process under one
limit (jit/clang/job_slots.h: KILN_COMPILE_THREADS, else torch's MAX_JOBS, else the CPUs the
process may use). Real Clang, real CUDA headers, nvJitLink; compiling for sm_90 needs no GPU.
What it gains in time is measured by tools/bench/compare --only cuda-extensions, not here."""
import os
import re

import pytest

from conftest import run_python  # noqa: E402
from test_torch_cuda_extension import fatbin_images, section  # noqa: E402

TOOLKIT = os.environ.get("CUDA_HOME", "/usr/local/cuda")
needs_toolkit = pytest.mark.skipif(not os.path.isfile(os.path.join(TOOLKIT, "include", "cuda_runtime.h")),
                                   reason="no CUDA toolkit at %s" % TOOLKIT)

# Five kernels: two share a device variable (it exists once: they must stay in one part), two
# call one helper (each part has its own copy), one uses __shared__ memory.
SOURCE = r"""
#include <cuda_runtime.h>
__device__ int counter;
static __device__ __attribute__((noinline)) float twice(float x) { return 2 * x; }
template <typename T> __global__ void k_scale(T* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = twice(p[i]);
}
__global__ void k_count(int* out) { atomicAdd(&counter, 1); out[0] = counter; }
__global__ void k_count_again(int* out) { out[1] = counter; }
__global__ void k_shared(float* p) {
  __shared__ float s[32];
  s[threadIdx.x] = p[threadIdx.x];
  __syncthreads();
  p[threadIdx.x] = twice(s[31 - threadIdx.x]);
}
void run(float* p, double* d, int* c, int n) {
  k_scale<<<1, 32>>>(p, n); k_scale<<<1, 32>>>(d, n); k_count<<<1, 1>>>(c); k_shared<<<1, 32>>>(p); k_count_again<<<1, 1>>>(c);
}
"""
KERNELS = [b"_Z7k_scaleIfEvPT_i", b"_Z7k_scaleIdEvPT_i", b"_Z7k_countPi", b"_Z13k_count_againPi", b"_Z8k_sharedPf"]


def build(tmp_path, tag, env):
    """Builds the library in a fresh process and cache; returns (library bytes, debug log, trace folder)."""
    folder = tmp_path / tag
    (folder / "trace").mkdir(parents=True)
    source = folder / "kernels.cu"
    source.write_text(SOURCE)
    code = """
        import kiln
        lib = kiln.context("none").build_library("kiln_jobs", [%r], cuda_archs=["sm_90"], flags=["-std=c++17"],
                                                 cuda_flags=["-std=c++17", "-O3"], output=%r)
        print("built", lib["path"])
    """ % (str(source), str(folder / "lib.so"))
    # No PCH: none would be used again, and the process would wait for its background build.
    full = {"KILN_CACHE_DIR": str(folder / "cache"), "KILN_LOG": "debug", "KILN_TIME_TRACE": str(folder / "trace"), "KILN_PCH": "0"}
    full.update(env)
    done = run_python(code, env=full)
    assert "built" in done.stdout, done.stdout + done.stderr[-3000:]
    return (folder / "lib.so").read_bytes(), done.stderr, folder / "trace"


def cubins(library_bytes, tmp_path):
    path = tmp_path / "copy.so"
    path.write_bytes(library_bytes)
    return [payload for kind, sm, payload in fatbin_images(section(str(path), ".nv_fatbin")) if kind == 2 and sm == 90]


@needs_toolkit
def test_a_device_pass_is_split_by_kernel_under_the_job_limit_and_the_bytes_do_not_depend_on_it(tmp_path):
    # KILN_COMPILE_THREADS first, then MAX_JOBS (torch's loader reads it for ninja).
    one, one_log, trace = build(tmp_path, "one-job", {"KILN_COMPILE_THREADS": "1", "MAX_JOBS": "3"})
    # One job at a time, and still done: the host pass lets its slot go while it waits for the
    # fat binary its device pass is making.
    assert re.search(r"at most 1 at once so far, limit 1 \(KILN_COMPILE_THREADS=1\)", one_log), one_log[-3000:]
    split = re.search(r"sm_90 split into (\d+) parts \(kernels: ([\d, ]+)\)", one_log)
    assert split and int(split.group(1)) >= 2, one_log[-3000:]
    parts = sorted(trace.glob("kernels.cu.sm_90-part*.ptx"))
    texts = [p.read_text() for p in parts]
    assert len(texts) == int(split.group(1))
    entries = [re.findall(r"^\.visible \.entry (\w+)\(", t, re.M) for t in texts]
    # Every kernel in exactly one part; the device variable defined once, with both its kernels.
    assert sorted(sum(entries, [])) == sorted(k.decode() for k in KERNELS)
    owners = [i for i, t in enumerate(texts) if re.search(r"^\.visible \.global .*\bcounter;", t, re.M)]
    assert len(owners) == 1 and {"_Z7k_countPi", "_Z13k_count_againPi"} <= set(entries[owners[0]]), entries
    # Helpers are the part's own: nothing but kernels and the variable is visible outside a part.
    for t in texts:
        assert not re.search(r"^\.visible \.func", t, re.M)
    # One cubin for sm_90 holding every kernel, linked from the parts.
    linked = cubins(one, tmp_path)
    assert len(linked) == 1 and all(k in linked[0] for k in KERNELS)

    two, two_log, _ = build(tmp_path, "two-jobs", {"MAX_JOBS": "2"})
    assert "limit 2 (MAX_JOBS=2)" in two_log, two_log[-3000:]
    assert one == two  # the parts are fixed by the module, not by the threads
