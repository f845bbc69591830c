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

// Has `request`'s compile run nvcc for `nvcc_sources` (CompileRequest::external_compiles): each
// nvcc is one of the compile's jobs, side by side with Clang's sources and the other nvcc runs,
// under the process's job limit, as ninja runs torch's loader's compilers; nvcc's object is linked
// in its source's place, and its diagnostics, log and dependencies are merged into the result. A
// source nvcc refuses fails the compile (CompileResult::failed_sources). `request` must outlive
// the compile; `label` names the library in logs.
void use_nvcc_for(jit::CompileRequest& request, const std::vector<size_t>& nvcc_sources, const jit::Nvcc& nvcc,
                  const std::string& label);

}  // namespace kiln::builders
