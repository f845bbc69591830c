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
  return invalid_argument("unknown target '" + std::string(text) + "' (this kiln builds for: cpu, cpu:x86-64-v2 .. cpu:x86-64-v4)");
}

}  // namespace kiln::builders
