// What the in-process Clang toolchain adds to a CUDA compile so that CUDA written for nvcc compiles:
// nvcc's version macros and kiln's compatibility header (cuda_compat_header.inc).
// Private to the in-process Clang toolchain (jit/clang/): included by its stages' translation units.
#pragma once

#include <string>
#include <vector>

#include "support/cuda_toolkit.h"

namespace kiln::jit::stages {

// kiln's CUDA compatibility header (cuda_compat_header.inc): what NVIDIA's headers give nvcc and
// Clang's CUDA headers lack. Where it appears to Clang: in the in-memory file system, in the
// folder kept out of dependency lists (the toolchain's identity covers its text).
#include "jit/clang/cuda_compat_header.inc"
constexpr const char* k_cuda_compat_path = "/kiln-precompiled/kiln_cuda_compat.h";

// What nvcc defines and Clang does not, from the toolkit's version (cuda.h's CUDA_VERSION; cuda.h
// is among the dependencies of every compile against the toolkit's headers): frameworks choose
// code by __CUDACC_VER_MAJOR__. Without it DeepSpeed's memory_access_utils.h takes its pre-CUDA-11
// branch, whose inline PTX lacks a ';' after cvta.to.shared: ptxas then refused the PTX with
// "Parsing error near 'cvt'" (quantizer, random_ltd, inference_core_ops, transformer_inference).
inline const std::vector<std::string>& cuda_version_defines() {
  static const std::vector<std::string> defines = [] {
    std::vector<std::string> out;
    auto headers = cuda_headers_at(cuda_toolkit_root());
    if (!headers) return out;
    const std::string& v = headers->version;  // "13.0"
    size_t dot = v.find('.');
    if (dot == std::string::npos || dot == 0 || v.find_first_not_of("0123456789.") != std::string::npos) return out;
    out.push_back("-D__CUDACC_VER_MAJOR__=" + v.substr(0, dot));
    out.push_back("-D__CUDACC_VER_MINOR__=" + (dot + 1 < v.size() ? v.substr(dot + 1) : std::string("0")));
    return out;
  }();
  return defines;
}

}  // namespace kiln::jit::stages
