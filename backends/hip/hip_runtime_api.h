// The HIP runtime, loaded with dlopen (libamdhip64) on first use: kiln builds and runs where
// there is no ROCm, and says so when a hip target needs one. Its calls mirror the CUDA driver
// API's (backends/cuda), one for one.
#pragma once

#include <string>
#include <vector>

#include "support/status.h"

namespace kiln::backends::hip {

struct Runtime {
#define KILN_HIP(name, params) int(*name) params = nullptr;
#include "backends/hip/hip_symbols.def"
#undef KILN_HIP
  const char* (*hipGetErrorName)(int) = nullptr;
  std::string library;  // the file it came from
  // "hipMalloc failed: hipErrorOutOfMemory (2)" for messages.
  std::string error(const char* call, int code) const;
};

// The libraries tried, in order: $KILN_HIP_LIBRARY, then ROCm 6's and 5's sonames.
std::vector<std::string> hip_library_candidates();

// The runtime, loaded and initialised (hipInit) once per process; kUnavailable says why not.
Result<const Runtime*> runtime_api();

// Whether an AMD GPU is there, learnt without loading or initialising HIP: the visible-devices
// variables, /dev/kfd and the KFD topology's GPU nodes. Ok, or kUnavailable saying what is missing.
Status gpu_present_without_initialising();

}  // namespace kiln::backends::hip

#define KILN_HIP_CHECK(rt, call_expr, what)                                                              \
  do {                                                                                                   \
    int kiln_hip_rc_ = (rt).call_expr;                                                                   \
    if (kiln_hip_rc_ != 0)                                                                               \
      return ::kiln::Status(::kiln::StatusCode::kInternal, std::string(what) + ": " +                    \
                                                               (rt).error(#call_expr, kiln_hip_rc_));    \
  } while (0)
