// CPU modules: a host shared object (runtime::HostObject, loaded from bytes through a memfd)
// and its kiln_entry_<name> entry points. Maps to CUmodule.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backends/cpu/cpu_stream.h"
#include "runtime/accelerator.h"
#include "runtime/host_object.h"

namespace kiln::backends::cpu {

class CpuKernel final : public runtime::Kernel {
 public:
  CpuKernel(runtime::KernelSignature sig, kiln_cpu_entry_fn entry) : m_sig(std::move(sig)), m_entry(entry) {}
  const runtime::KernelSignature& signature() const override { return m_sig; }
  using runtime::Kernel::launch;
  Status launch(runtime::Stream& stream, const runtime::LaunchConfig& config, const void* const* args,
                size_t num_args) override;

 private:
  runtime::KernelSignature m_sig;
  kiln_cpu_entry_fn m_entry;
};

class CpuModule final : public runtime::Module {
 public:
  static Result<std::shared_ptr<CpuModule>> load(const runtime::ModuleImage& image);
  ~CpuModule() override;
  Result<runtime::Kernel*> kernel(std::string_view name) override;

 private:
  CpuModule() = default;
  std::unique_ptr<runtime::HostObject> m_object;
  std::string m_label;
  std::map<std::string, std::unique_ptr<CpuKernel>, std::less<>> m_kernels;
};

}  // namespace kiln::backends::cpu
