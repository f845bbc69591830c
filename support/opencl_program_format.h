// The bytes of an "opencl-program" artifact: what an OpenCL device needs to build an op's
// kernels, whichever way it takes them. Written by the Clang toolchain (jit/), read by the
// OpenCL backend (backends/opencl): it lives here because neither may depend on the other.
//
// - `spirv`: the program compiled in-process by LLVM's SPIR-V back end and passed by
//   SPIRV-Tools' validator, for devices that take IL (clCreateProgramWithIL).
// - `source`: the same program preprocessed (the op's headers and defines already applied, line
//   markers kept so a device compiler's errors still name the op's files), for devices that
//   take only OpenCL C (PoCL).
// - per kernel, the kind of each parameter as the compiler laid it out: the runtime passes a
//   device pointer, a value or a size of local memory accordingly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln {

// One letter per kernel parameter.
inline constexpr char k_opencl_global = 'g';    // __global pointer: a device allocation
inline constexpr char k_opencl_constant = 'c';  // __constant pointer: a device allocation
inline constexpr char k_opencl_local = 'l';     // __local pointer: the launch's dynamic shared memory
inline constexpr char k_opencl_value = 'v';     // by value

struct OpenClKernelInfo {
  std::string name;
  std::string params;                 // one kind letter per parameter
  std::vector<uint32_t> value_sizes;  // bytes of each parameter as passed (pointers: 8)
};

struct OpenClProgramImage {
  std::vector<OpenClKernelInfo> kernels;
  std::string build_options;  // for clBuildProgram: "-cl-std=CL3.0"
  std::string spirv;
  std::string source;
};

std::string encode_opencl_program(const OpenClProgramImage& p);
// kDataLoss for anything that is not one.
Result<OpenClProgramImage> decode_opencl_program(std::string_view bytes);

}  // namespace kiln
