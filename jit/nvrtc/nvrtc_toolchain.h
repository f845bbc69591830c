// The NVRTC toolchain: CUDA C++ -> cubin for one sm_XX plus PTX for newer GPUs, with
// libnvrtc loaded by dlopen on first use. Needs no LLVM and no GPU; links into kiln_jit.
#pragma once

#include <string>
#include <vector>

#include "jit/toolchain.h"

namespace kiln::jit {

// Where kiln looks for libnvrtc: $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64,
// then the loader's own search path.
std::vector<std::string> nvrtc_search_paths();

// Loads libnvrtc once per process (thread-safe). kUnavailable names what is missing and where
// kiln looked.
Result<Toolchain*> load_nvrtc_toolchain();

// "nvrtc;libnvrtc.so.13.0.48=<ELF build id>", read from the library file without loading it.
Result<std::string> nvrtc_toolchain_identity();

// A compiled CUDA module as kiln stores it ("cuda-module" artifacts): the cubin for the
// target's sm and the PTX for compute capabilities above it.
struct CudaModuleImage {
  std::string arch;   // "sm_90"
  std::string cubin;
  std::string ptx;
};
std::string encode_cuda_module(const CudaModuleImage& m);
Result<CudaModuleImage> decode_cuda_module(std::string_view bytes);

}  // namespace kiln::jit
