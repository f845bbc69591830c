// NVTX ranges without the CUDA toolkit at build time: the NVTX entry points are looked up
// with dlopen in libnvtx3interop.so.1 (CUDA 12.8 and later, in the toolkit's lib64) or
// libnvToolsExt.so.1 (older toolkits), so range_push/range_pop show up in Nsight Systems
// when kiln runs under it. Without a profiler attached the calls return at once.
#pragma once

#include <string>

#include "support/status.h"

namespace kiln::backends::cuda {

struct Nvtx {
  int (*range_push)(const char* message) = nullptr;  // nvtxRangePushA
  int (*range_pop)() = nullptr;                      // nvtxRangePop
  std::string library;                               // the file it came from
};

// Loaded once per process; kUnavailable says where kiln looked.
Result<const Nvtx*> nvtx();

}  // namespace kiln::backends::cuda
