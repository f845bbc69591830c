#include "backends/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

namespace kiln::backends::cuda {

std::string Driver::error(const char* call, int code) const {
  const char* name = nullptr;
  if (cuGetErrorName) cuGetErrorName(code, &name);
  std::string c = call;
  c = c.substr(0, c.find('('));
  return c + " failed: " + (name ? name : "CUDA error") + " (" + std::to_string(code) + ")";
}

Result<const Driver*> driver() {
  static std::once_flag once;
  static Driver d;
  static Status status;
  std::call_once(once, [] {
    void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      status = unavailable(std::string("no CUDA driver: cannot load libcuda.so.1 (") + (e ? e : "not found") + ")");
      return;
    }
#define KILN_CU(name, params)                                                       \
  d.name = reinterpret_cast<int(*) params>(::dlsym(h, #name));                       \
  if (!d.name) {                                                                     \
    status = unavailable("libcuda.so.1 has no " #name ": the driver is too old for kiln"); \
    return;                                                                          \
  }
#include "backends/cuda/cuda_symbols.def"
#undef KILN_CU
    if (int rc = d.cuInit(0); rc != 0) {
      status = unavailable("the CUDA driver did not initialise: " + d.error("cuInit", rc));
      return;
    }
  });
  if (!status.ok()) return status;
  return static_cast<const Driver*>(&d);
}

}  // namespace kiln::backends::cuda
