// Programs, modules and kernels of the OpenCL backend.
//
// OpenClModule::load makes a cl_program of an artifact: it reloads the device binary that the
// caller's DerivedCodeCache kept for these bytes on this device (platform, device, driver), else
// builds from SPIR-V where the device takes IL and from the preprocessed OpenCL C otherwise, and
// keeps the binary it built for the next process. An OpenClModule maps to CUmodule; each of its
// OpenClKernels (a cl_kernel, checked against the spec's signature when created) to CUfunction.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/opencl/opencl_api.h"
#include "runtime/accelerator.h"
#include "support/opencl_program_format.h"

namespace kiln::backends::opencl {

class OpenClAccelerator;
class OpenClStream;

// How the programs loaded so far were made: built by the device's compiler (from SPIR-V or
// OpenCL C), or reloaded from a device binary a DerivedCodeCache kept.
struct ProgramCounters {
  std::atomic<uint64_t> built_from_source{0}, built_from_il{0}, reloaded_binaries{0};
};

// Thread-safe: launches on several streams at once take turns setting the cl_kernel's arguments.
class OpenClKernel final : public runtime::Kernel {
 public:
  OpenClKernel(const OpenClAccelerator& acc, runtime::KernelSignature sig, cl_kernel kernel, std::string kinds)
      : m_acc(acc), m_sig(std::move(sig)), m_kernel(kernel), m_kinds(std::move(kinds)) {}
  ~OpenClKernel() override;
  const runtime::KernelSignature& signature() const override { return m_sig; }
  using runtime::Kernel::launch;
  Status launch(runtime::Stream& stream, const runtime::LaunchConfig& config, const void* const* args, size_t num_args) override;

 private:
  Status enqueue(OpenClStream& s, const void* const* args, const runtime::LaunchConfig& config);

  const OpenClAccelerator& m_acc;
  runtime::KernelSignature m_sig;
  cl_kernel m_kernel;
  std::string m_kinds;  // each parameter's kind as the compiler laid it out (k_opencl_local, ...)
  std::mutex m_mutex;
};

class OpenClModule final : public runtime::Module {
 public:
  // The module of an opencl-program or spirv artifact the accelerator can load (its can_load
  // said so), its kernels checked and created; `counters` counts how its program was made.
  static Result<std::shared_ptr<OpenClModule>> load(const OpenClAccelerator& acc, const runtime::ModuleImage& image,
                                                    ProgramCounters& counters);

  OpenClModule(const OpenClAccelerator& acc, cl_program program, std::string label)
      : m_acc(acc), m_program(program), m_label(std::move(label)) {}
  ~OpenClModule() override;
  Result<runtime::Kernel*> kernel(std::string_view name) override;
  // Checks the signature the spec gives against the kernel the compiler made, then creates it.
  Status add(const runtime::KernelSignature& sig, const OpenClKernelInfo& info);

 private:
  const OpenClAccelerator& m_acc;
  cl_program m_program;
  std::string m_label;
  std::map<std::string, std::unique_ptr<OpenClKernel>, std::less<>> m_kernels;
};

}  // namespace kiln::backends::opencl
