// The last resort for a host library's CUDA sources (a torch extension's .cu files: host code and
// device code, which NVRTC cannot take): where Clang's CUDA path refuses a source that the CUDA
// toolkit's nvcc accepts, nvcc compiles that source, as a subprocess, into an object that the
// Clang toolchain links into the library in the source's place. The library is then stored under
// a key whose toolchain identity names nvcc (its version and files), and that Clang refused the
// source is remembered (Ops::remember_failed_route, per source), so the next build goes straight
// to nvcc and a hit runs neither compiler. Ops::build_cuda_library (nvcc_route.cpp) decides.
#pragma once

#include <string>
#include <vector>

#include "jit/nvcc/nvcc_compiler.h"
#include "jit/toolchain.h"

namespace kiln::builders {

// Compiles `nvcc_sources` of `request` with nvcc (one after another: each nvcc already runs a
// pipeline of processes), then the rest of the library with `clang`, the nvcc objects linked in
// their sources' places. nvcc's diagnostics, log and dependencies are merged into the result; a
// source nvcc refuses fails the compile without running Clang.
jit::CompileResult compile_with_nvcc_objects(jit::Toolchain& clang, jit::CompileRequest& request, const std::vector<size_t>& nvcc_sources,
                                             const jit::Nvcc& nvcc, const std::string& label);

}  // namespace kiln::builders
