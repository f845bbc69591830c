// The OpenCL API, loaded with dlopen from the ICD loader (libOpenCL.so.1) on first use: kiln
// builds and runs where there is none, and says so when the opencl backend is asked for.
#pragma once

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <string>

#include "support/status.h"

namespace kiln::backends::opencl {

struct Api {
#define KILN_CL(name) decltype(&::name) name = nullptr;
#include "backends/opencl/opencl_symbols.def"
#undef KILN_CL
};

// The API, loaded once per process; kUnavailable says why not (no loader, a loader older
// than OpenCL 2.0).
Result<const Api*> api();

// Whether an ICD loader can be opened, without loading any driver through it.
Status loader_present();

// "CL_OUT_OF_RESOURCES (-5)" for messages.
std::string error_name(cl_int code);

}  // namespace kiln::backends::opencl

// Status from a cl_int: ok for CL_SUCCESS, else "<what>: <call> failed: CL_... (code)".
#define KILN_CL_CHECK(call_expr, what)                                                                      \
  do {                                                                                                      \
    cl_int kiln_cl_rc_ = (call_expr);                                                                       \
    if (kiln_cl_rc_ != CL_SUCCESS)                                                                          \
      return ::kiln::Status(::kiln::StatusCode::kInternal, std::string(what) + ": " + #call_expr + " failed: " + \
                                                               ::kiln::backends::opencl::error_name(kiln_cl_rc_)); \
  } while (0)
