#include "backends/hip/hip_runtime_api.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <vector>

namespace kiln::backends::hip {

std::string Runtime::error(const char* call, int code) const {
  const char* name = hipGetErrorName ? hipGetErrorName(code) : nullptr;
  std::string c = call;
  c = c.substr(0, c.find('('));
  return c + " failed: " + (name ? name : "HIP error") + " (" + std::to_string(code) + ")";
}

std::vector<std::string> hip_library_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("KILN_HIP_LIBRARY"); env && *env) out.push_back(env);
  for (const char* name : {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so", "/opt/rocm/lib/libamdhip64.so"}) out.push_back(name);
  return out;
}

Result<const Runtime*> runtime_api() {
  static std::once_flag once;
  static Runtime rt;
  static Status status;
  std::call_once(once, [] {
    void* h = nullptr;
    std::string tried;
    for (auto& name : hip_library_candidates()) {
      h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) {
        rt.library = name;
        break;
      }
      tried += (tried.empty() ? "" : ", ") + name;
    }
    if (!h) {
      status = unavailable("no HIP runtime: cannot load " + tried + " (install ROCm, or set KILN_HIP_LIBRARY)");
      return;
    }
#define KILN_HIP(name, params)                                                                  \
  rt.name = reinterpret_cast<int(*) params>(::dlsym(h, #name));                                  \
  if (!rt.name) {                                                                                \
    status = unavailable(rt.library + " has no " #name ": this HIP runtime is too old for kiln"); \
    return;                                                                                      \
  }
#include "backends/hip/hip_symbols.def"
#undef KILN_HIP
    rt.hipGetErrorName = reinterpret_cast<const char* (*)(int)>(::dlsym(h, "hipGetErrorName"));
    if (int rc = rt.hipInit(0); rc != 0) status = unavailable("the HIP runtime did not initialise: " + rt.error("hipInit", rc));
  });
  if (!status.ok()) return status;
  return static_cast<const Runtime*>(&rt);
}

Status gpu_present_without_initialising() {
  for (const char* var : {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"})
    if (const char* v = std::getenv(var); v && (!*v || v[0] == '-'))
      return unavailable(std::string(var) + "=\"" + v + "\" hides every AMD GPU");
  struct stat st{};
  if (::stat("/dev/kfd", &st) != 0) return unavailable("no AMD GPU: /dev/kfd (the ROCm kernel driver) does not exist");
  // KFD lists every agent, the CPUs too; a GPU node has a non-zero gfx_target_version.
  bool gpu = false;
  const std::string nodes = "/sys/class/kfd/kfd/topology/nodes";
  if (DIR* d = ::opendir(nodes.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream props(nodes + "/" + e->d_name + "/properties");
      std::string key;
      long long value = 0;
      while (props >> key >> value)
        if (key == "gfx_target_version" && value != 0) gpu = true;
    }
    ::closedir(d);
  }
  if (!gpu) return unavailable("/dev/kfd exists but the KFD topology lists no GPU");
  for (auto& name : hip_library_candidates()) {
    if (void* h = ::dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL)) {
      ::dlclose(h);
      return {};
    }
  }
  return unavailable("an AMD GPU is present but no HIP runtime library is (libamdhip64.so.6 or .so.5; set KILN_HIP_LIBRARY)");
}

}  // namespace kiln::backends::hip
