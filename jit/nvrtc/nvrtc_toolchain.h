// The NVRTC toolchain: CUDA C++ -> cubin for one sm_XX plus PTX for newer GPUs, with
// libnvrtc loaded by dlopen on first use. Needs no LLVM and no GPU; links into kiln_jit.
#pragma once

#include <string>
#include <vector>

#include "jit/toolchain.h"

namespace kiln::jit {

// Where kiln looks for libnvrtc: $KILN_NVRTC_LIBRARY (a file, and then nowhere else), else
// $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64, then the loader's search path.
std::vector<std::string> nvrtc_search_paths();

// Loads libnvrtc once per process (thread-safe). kUnavailable names what is missing and where
// kiln looked.
Result<Toolchain*> load_nvrtc_toolchain();

// "nvrtc;libnvrtc.so.13.0.48=<ELF build id>", read from the library file without loading it.
Result<std::string> nvrtc_toolchain_identity();

}  // namespace kiln::jit
