// nvJitLink, loaded with dlopen: PTX -> cubin in the calling process (7-10 ms, no GPU).
// Used by both CUDA paths (NVRTC and Clang) to make a cubin per listed architecture from
// one PTX.
#pragma once

#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::jit {

// True once nvJitLink can be used (loaded on the first call; thread-safe). Looks beside
// libnvrtc's folders (CUDA_HOME, CUDA_PATH, /usr/local/cuda), then the loader's path.
bool nvjitlink_available();

// ";libnvJitLink.so.13=<build id>", read without loading, or "" where there is none.
std::string nvjitlink_identity();

// The cubin for compute capability `sm` (e.g. 90) linked from `ptx`; errors carry its log.
Result<std::string> link_cubin(std::string_view ptx, int sm);

}  // namespace kiln::jit
