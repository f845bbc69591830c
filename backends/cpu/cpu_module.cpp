#include "backends/cpu/cpu_module.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace kiln::backends::cpu {

Status CpuKernel::launch(runtime::Stream& stream, runtime::Dim3 grid, runtime::Dim3 block, const void* const* args,
                         size_t num_args) {
  auto* s = dynamic_cast<CpuStream*>(&stream);
  if (!s) return invalid_argument("kernel " + m_sig.name + ": the stream belongs to another accelerator");
  return s->launch(m_entry, m_sig, grid, block, args, num_args);
}

Result<std::shared_ptr<CpuModule>> CpuModule::load(const runtime::ModuleImage& image) {
  // A memfd gives dlopen a real file without touching the disk (TOOLCHAIN-FACTS.md:
  // dlopen from /proc/self/fd/N costs ~25 us, the same as from a file).
  std::string name = "kiln:" + image.label;
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return errno_status("memfd_create for " + image.label, errno);
  size_t done = 0;
  while (done < image.bytes.size()) {
    ssize_t n = ::write(fd, image.bytes.data() + done, image.bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return errno_status("write memfd for " + image.label, err);
    }
    done += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    ::close(fd);
    const char* err = ::dlerror();
    return invalid_argument("cannot load " + image.label + " (" + image.target + "): " + (err ? err : "dlopen failed"));
  }
  std::shared_ptr<CpuModule> module(new CpuModule);
  module->m_handle = handle;
  // The fd stays open while the module is loaded: glibc finds already-loaded objects by
  // name, and a reused /proc/self/fd/N would hand back this module for another artifact.
  module->m_fd = fd;
  module->m_label = image.label;

  auto* abi = static_cast<const int*>(::dlsym(handle, "kiln_cpu_abi_version"));
  if (!abi || *abi != KILN_CPU_ABI_VERSION)
    return invalid_argument(image.label + ": not a kiln CPU module of ABI version " +
                            std::to_string(KILN_CPU_ABI_VERSION) + (abi ? " (it has " + std::to_string(*abi) + ")" : ""));
  for (const auto& sig : image.kernels) {
    std::string symbol = KILN_CPU_ENTRY_PREFIX + sig.name;
    void* fn = ::dlsym(handle, symbol.c_str());
    if (!fn) return not_found(image.label + ": entry point " + symbol + " is missing from the module");
    module->m_kernels[sig.name] = std::make_unique<CpuKernel>(sig, reinterpret_cast<kiln_cpu_entry_fn>(fn));
  }
  return module;
}

CpuModule::~CpuModule() {
  if (m_handle) ::dlclose(m_handle);
  if (m_fd >= 0) ::close(m_fd);
}

Result<runtime::Kernel*> CpuModule::kernel(std::string_view name) {
  auto it = m_kernels.find(name);
  if (it == m_kernels.end()) return not_found(m_label + " has no kernel named '" + std::string(name) + "'");
  return static_cast<runtime::Kernel*>(it->second.get());
}

}  // namespace kiln::backends::cpu
