"""The device passes of a host library's CUDA source skip the bodies of the system headers'
host-only functions (jit/clang/frontend_actions.h, SkipHostOnlyBodies): the device never runs
them, and torch's headers cost a device pass half as much without them. What a skipped body would
still have made the device compile, a non-template header function that launches a kernel
template, is found by comparing what the host pass registers with what the device pass defined,
and the source is compiled again with every body. Real Clang, real CUDA headers and nvJitLink;
compiling for sm_90 needs no GPU."""
import os

import pytest

from conftest import run_python  # noqa: E402
from test_torch_cuda_extension import fatbin_images, section  # noqa: E402

TOOLKIT = os.environ.get("CUDA_HOME", "/usr/local/cuda")
needs_toolkit = pytest.mark.skipif(not os.path.isfile(os.path.join(TOOLKIT, "include", "cuda_runtime.h")),
                                   reason="no CUDA toolkit at %s" % TOOLKIT)

# A system header (its pragma says so) as libraries write them: host-only helpers, and one
# non-template host function that launches a kernel template, which only its body instantiates.
HEADER = """
#pragma once
#pragma GCC system_header
#include <cuda_runtime.h>
template <typename T> __global__ void header_kernel(T* out) { out[threadIdx.x] = T(7); }
inline int host_only_helper(int x) { int y = 0; for (int i = 0; i < x; ++i) y += i * 3; return y; }
struct HostOnly { int twice(int x) const { return host_only_helper(x) * 2; } };
#ifdef LAUNCHES_FROM_HEADER
inline void header_launch(int* out) { header_kernel<int><<<1, 32>>>(out); }
#endif
"""

SOURCE = """
#include "kiln_test_launch.h"
__global__ void own_kernel(int* out) { out[0] = 1; }
void run(int* out) {
  if (HostOnly{}.twice(3) != 18) return;
#ifdef LAUNCHES_FROM_HEADER
  header_launch(out);
#else
  header_kernel<float><<<1, 32>>>(reinterpret_cast<float*>(out));
#endif
  own_kernel<<<1, 1>>>(out);
}
"""


def build(tmp_path, tag, launches_from_header, keep_bodies=False):
    """Builds the library in a fresh process and cache; returns (library bytes, debug log)."""
    folder = tmp_path / tag
    (folder / "include").mkdir(parents=True)
    (folder / "include" / "kiln_test_launch.h").write_text(HEADER)
    source = folder / "launch.cu"
    source.write_text(SOURCE)
    defines = ["LAUNCHES_FROM_HEADER"] if launches_from_header else []
    code = """
        import kiln
        lib = kiln.context("none").build_library("kiln_device_pass", [%r], include_dirs=[%r], defines=%r,
                                                 cuda_archs=["sm_90"], flags=["-std=c++17"], cuda_flags=["-std=c++17"],
                                                 output=%r)
        print("built", lib["path"])
    """ % (str(source), str(folder / "include"), defines, str(folder / "lib.so"))
    env = {"KILN_CACHE_DIR": str(folder / "cache"), "KILN_LOG": "debug"}
    if keep_bodies:
        env["KILN_CUDA_HOST_BODIES"] = "1"
    done = run_python(code, env=env)
    assert "built" in done.stdout, done.stdout + done.stderr[-3000:]
    return (folder / "lib.so").read_bytes(), done.stderr


def device_code(library_bytes, tmp_path):
    path = tmp_path / "copy.so"
    path.write_bytes(library_bytes)
    return [payload for kind, sm, payload in fatbin_images(section(str(path), ".nv_fatbin")) if kind == 2]


@needs_toolkit
def test_skipping_host_bodies_changes_nothing_in_the_library(tmp_path):
    skipped, log = build(tmp_path, "skip", launches_from_header=False)
    kept, _ = build(tmp_path, "keep", launches_from_header=False, keep_bodies=True)
    assert "compiling it again" not in log, log[-3000:]
    cubins = device_code(skipped, tmp_path)
    assert len(cubins) == 1 and b"_Z13header_kernelIfEvPT_" in cubins[0] and b"_Z10own_kernelPi" in cubins[0]
    # The same bytes, every body parsed or not: the output, and so the cache key, is unchanged.
    assert skipped == kept


@needs_toolkit
def test_a_kernel_only_a_skipped_header_body_launches_is_found_and_compiled_again(tmp_path):
    library, log = build(tmp_path, "header-launch", launches_from_header=True)
    # The host pass registers header_kernel<int>; the skipping device pass did not define it.
    assert "the host pass registers _Z13header_kernelIiEvPT_ (sm_90)" in log and "compiling it again" in log, log[-3000:]
    cubins = device_code(library, tmp_path)
    assert len(cubins) == 1 and b"_Z13header_kernelIiEvPT_" in cubins[0] and b"_Z10own_kernelPi" in cubins[0]
    kept, kept_log = build(tmp_path, "header-launch-keep", launches_from_header=True, keep_bodies=True)
    assert "compiling it again" not in kept_log
    assert library == kept
