#include "builders/target.h"

#include "runtime/host_cpu.h"

namespace kiln::builders {

Result<Target> parse_target(std::string_view text) {
  std::string_view backend = text.substr(0, text.find(':'));
  std::string_view arch = backend.size() < text.size() ? text.substr(backend.size() + 1) : std::string_view();
  if (backend == "cpu") {
    if (arch.empty()) return Target{"cpu", runtime::x86_level_name(runtime::host_x86_level())};
    if (!runtime::parse_x86_level(arch))
      return invalid_argument("unknown cpu level '" + std::string(arch) + "' in target '" + std::string(text) +
                              "' (known: x86-64, x86-64-v2, x86-64-v3, x86-64-v4)");
    return Target{"cpu", std::string(arch)};
  }
  if (backend == "cuda") {
    // cuda:sm_90 (a compute capability as NVIDIA spells it: sm_ and two or three digits).
    bool ok = arch.size() >= 5 && arch.size() <= 6 && arch.substr(0, 3) == "sm_";
    for (size_t i = 3; ok && i < arch.size(); ++i) ok = arch[i] >= '0' && arch[i] <= '9';
    if (!ok) return invalid_argument("CUDA target '" + std::string(text) + "' needs an architecture, e.g. cuda:sm_90");
    return Target{"cuda", std::string(arch)};
  }
  return invalid_argument("unknown target '" + std::string(text) +
                          "' (this kiln builds for: cpu, cpu:x86-64-v2 .. cpu:x86-64-v4, cuda:sm_XX)");
}

}  // namespace kiln::builders
