// The in-process Clang toolchain's CUDA fat-binary stage: a host library's .cu source into a host
// object that embeds and registers the device code for each architecture.
#pragma once

#include <string_view>
#include <vector>

#include "jit/clang/compile_unit.h"

namespace kiln::jit::stages {

// "sm_90" -> 90 (a cubin), "compute_90" -> -90 (PTX); 0 for anything else.
int cuda_arch_code(std::string_view arch);

// The architectures device code is compiled for: every sm and compute listed, ascending.
std::vector<int> cuda_device_sms(const CompileRequest& request);

// A host library's CUDA source into a host object (see CudaPass): the device passes, one thread
// per architecture; a cubin per "sm_" architecture from its own PTX by nvJitLink (each pass
// compiled with that architecture's __CUDA_ARCH__, as nvcc's -gencode does), the PTX of each
// "compute_" one; one fat binary of them; the host pass. What the compiler said goes into
// `consumer` (the host pass) and `part` (the device passes' diagnostics, without repeats, and
// their log when they failed or said something the host pass did not).
bool compile_cuda_unit(const SourceFile& source, const CompileRequest& request, CollectingConsumer& consumer, CompileResult& part,
                       ObjectFile& object);

}  // namespace kiln::jit::stages
