// The CUDA driver API, loaded with dlopen("libcuda.so.1") on first use: kiln builds and runs
// where there is no driver, and says so when a CUDA target needs one.
#pragma once

#include <string>

#include "support/status.h"

namespace kiln::backends::cuda {

struct Driver {
#define KILN_CU(name, params) int(*name) params = nullptr;
#include "backends/cuda/cuda_symbols.def"
#undef KILN_CU
  // "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)" for messages.
  std::string error(const char* call, int code) const;
};

// The driver, loaded and initialised once per process; kUnavailable says why not.
Result<const Driver*> driver();

// Status from a CUresult: ok for 0, else "<what>: <call> failed: CUDA_ERROR_... (code)".
#define KILN_CU_CHECK(drv, call_expr, what)                                                \
  do {                                                                                     \
    int kiln_cu_rc_ = (drv).call_expr;                                                     \
    if (kiln_cu_rc_ != 0)                                                                  \
      return ::kiln::Status(::kiln::StatusCode::kInternal, std::string(what) + ": " +      \
                                                               (drv).error(#call_expr, kiln_cu_rc_)); \
  } while (0)

}  // namespace kiln::backends::cuda
