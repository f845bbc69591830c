// The in-process Clang toolchain's CUDA fat-binary stage: a host library's .cu source into a host
// object that embeds and registers the device code for each architecture.
#pragma once

#include <string_view>
#include <vector>

#include "jit/clang/compile_unit.h"

namespace kiln::jit::stages {

// A host library's CUDA source into a host object (see CudaPass): the device passes, one thread
// per architecture; a cubin per "sm_" architecture from its own PTX by nvJitLink (each pass
// compiled with that architecture's __CUDA_ARCH__, as nvcc's -gencode does), the PTX of each
// "compute_" one; one fat binary of them; the host pass. What the compiler said goes into
// `consumer` (the host pass) and `part` (the device passes' diagnostics, without repeats, and
// their log when they failed or said something the host pass did not). Each pass uses the PCH
// that request.cuda_pass_pchs holds for (`index`, its pass), if any.
bool compile_cuda_unit(const SourceFile& source, size_t index, const CompileRequest& request, CollectingConsumer& consumer,
                       CompileResult& part, ObjectFile& object);

// The PCH handed in for pass `pass` (see CompileRequest::pch_cuda_pass) of sources[index], or none.
inline std::string_view cuda_pass_pch(const CompileRequest& request, size_t index, int pass) {
  auto it = request.cuda_pass_pchs.find({index, pass});
  return it == request.cuda_pass_pchs.end() ? std::string_view() : it->second;
}

}  // namespace kiln::jit::stages
