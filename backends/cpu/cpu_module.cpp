#include "backends/cpu/cpu_module.h"


namespace kiln::backends::cpu {

Status CpuKernel::launch(runtime::Stream& stream, const runtime::LaunchConfig& config, const void* const* args,
                         size_t num_args) {
  auto* s = dynamic_cast<CpuStream*>(&stream);
  if (!s) return invalid_argument("kernel " + m_sig.name + ": the stream belongs to another accelerator");
  return s->launch(m_entry, m_sig, config, args, num_args);
}

Result<std::shared_ptr<CpuModule>> CpuModule::load(const runtime::ModuleImage& image) {
  auto object = runtime::HostObject::load(image.bytes, image.label);
  if (!object.ok()) return Status(object.status().code(), object.status().message() + " (" + image.target + ")");
  std::shared_ptr<CpuModule> module(new CpuModule);
  module->m_object = std::move(object).value();
  module->m_label = image.label;
  auto* abi = static_cast<const int*>(module->m_object->symbol("kiln_cpu_abi_version"));
  if (!abi || *abi != KILN_CPU_ABI_VERSION)
    return invalid_argument(image.label + ": not a kiln CPU module of ABI version " +
                            std::to_string(KILN_CPU_ABI_VERSION) + (abi ? " (it has " + std::to_string(*abi) + ")" : ""));
  for (const auto& sig : image.kernels) {
    std::string symbol = KILN_CPU_ENTRY_PREFIX + sig.name;
    void* fn = module->m_object->symbol(symbol);
    if (!fn) return not_found(image.label + ": entry point " + symbol + " is missing from the module");
    module->m_kernels[sig.name] = std::make_unique<CpuKernel>(sig, reinterpret_cast<kiln_cpu_entry_fn>(fn));
  }
  return module;
}

CpuModule::~CpuModule() = default;

Result<runtime::Kernel*> CpuModule::kernel(std::string_view name) {
  auto it = m_kernels.find(name);
  if (it == m_kernels.end()) return not_found(m_label + " has no kernel named '" + std::string(name) + "'");
  return static_cast<runtime::Kernel*>(it->second.get());
}

}  // namespace kiln::backends::cpu
