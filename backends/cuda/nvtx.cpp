#include "backends/cuda/nvtx.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "support/cuda_toolkit.h"

namespace kiln::backends::cuda {

Result<const Nvtx*> nvtx() {
  static std::once_flag once;
  static Nvtx n;
  static Status status;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    for (const char* name : {"libnvtx3interop.so.1", "libnvToolsExt.so.1"}) {
      for (auto& root : cuda_toolkit_roots()) candidates.push_back(root + "/lib64/" + name);
      candidates.push_back(name);  // the loader's own path
    }
    std::string tried;
    for (auto& path : candidates) {
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      n.range_push = reinterpret_cast<int (*)(const char*)>(::dlsym(h, "nvtxRangePushA"));
      n.range_pop = reinterpret_cast<int (*)()>(::dlsym(h, "nvtxRangePop"));
      if (n.range_push && n.range_pop) {
        n.library = path;
        return;
      }
      ::dlclose(h);
      tried += (tried.empty() ? "" : ", ") + path + " (no nvtxRangePushA)";
    }
    status = unavailable("no NVTX library: tried " + tried);
  });
  if (!status.ok()) return status;
  return static_cast<const Nvtx*>(&n);
}

}  // namespace kiln::backends::cuda
