// The bytes of a "cuda-module" artifact: the cubin for one sm and PTX for newer GPUs.
// Written by the NVRTC toolchain (jit/), read by the CUDA backend (backends/cuda): it lives
// here because neither may depend on the other.
#pragma once

#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

struct CudaModuleImage {
  std::string arch;  // "sm_90"
  std::string cubin;
  std::string ptx;
};

std::string encode_cuda_module(const CudaModuleImage& m);
// kDataLoss for anything that is not one.
Result<CudaModuleImage> decode_cuda_module(std::string_view bytes);

}  // namespace kiln
