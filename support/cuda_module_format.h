// The bytes of a "cuda-module" artifact: a cubin for each architecture of the target's list
// and PTX for the lowest, which newer GPUs compile through the driver. Written by the NVRTC
// toolchain (jit/), read by the CUDA backend (backends/cuda): it lives here because neither
// may depend on the other.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

struct CudaModuleImage {
  std::map<int, std::string> cubins;  // by sm: 80 -> cubin for sm_80
  int ptx_sm = 0;                      // the PTX is for compute_<ptx_sm>
  std::string ptx;
};

std::string encode_cuda_module(const CudaModuleImage& m);
// kDataLoss for anything that is not one.
Result<CudaModuleImage> decode_cuda_module(std::string_view bytes);

// What a GPU of compute capability `device_sm` (e.g. 90) runs from `m`: a cubin built for the
// same major version and a minor no newer (sm_80 runs on sm_86, not on sm_90), the newest such;
// else the PTX when it is no newer than the device. Sets *sm_used. Empty when nothing fits.
std::string_view pick_cuda_code(const CudaModuleImage& m, int device_sm, bool* is_cubin, int* sm_used);

}  // namespace kiln
