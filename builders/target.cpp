#include "builders/target.h"

#include "runtime/host_cpu.h"
#include "support/cuda_toolkit.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

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
    // cuda:sm_90, or a list: cuda:sm_80,sm_90,sm_100 (sorted, duplicates dropped): a cubin
    // each and PTX for the oldest. cuda:compute_90 alone: PTX only, which the driver compiles
    // for whatever GPU loads it (the smallest artifact and the fastest compile).
    if (arch.substr(0, 8) == "compute_") {
      std::string_view digits = arch.substr(8);
      bool ok = digits.size() >= 2 && digits.size() <= 3;
      for (char c : digits) ok = ok && c >= '0' && c <= '9';
      int sm = ok ? std::atoi(std::string(digits).c_str()) : 0;
      if (sm < 10) return invalid_argument("CUDA target '" + std::string(text) + "': PTX-only targets read cuda:compute_90");
      return Target{"cuda", "compute_" + std::to_string(sm)};
    }
    std::vector<int> archs;
    std::string_view rest = arch;
    while (true) {
      std::string_view item = rest.substr(0, rest.find(','));
      if (item.substr(0, 5) == "cuda:") item.remove_prefix(5);
      bool ok = item.size() >= 5 && item.size() <= 6 && item.substr(0, 3) == "sm_";
      for (size_t i = 3; ok && i < item.size(); ++i) ok = item[i] >= '0' && item[i] <= '9';
      if (!ok)
        return invalid_argument("CUDA target '" + std::string(text) +
                                "' needs architectures such as cuda:sm_90, cuda:sm_80,sm_90,sm_100 or cuda:compute_90 "
                                "(PTX only)");
      int sm = ok ? std::atoi(std::string(item.substr(3)).c_str()) : 0;
      if (sm < 10)  // compute capabilities have a major and a minor digit: sm_00 is no GPU
        return invalid_argument("CUDA target '" + std::string(text) + "' names no GPU architecture: use e.g. cuda:sm_90");
      if (std::find(archs.begin(), archs.end(), sm) == archs.end()) archs.push_back(sm);
      if (item.size() == rest.size() || rest.find(',') == std::string_view::npos) break;
      rest.remove_prefix(rest.find(',') + 1);
    }
    std::sort(archs.begin(), archs.end());
    std::string normal;
    for (int sm : archs) normal += (normal.empty() ? "sm_" : ",sm_") + std::to_string(sm);
    return Target{"cuda", normal};
  }
  return invalid_argument("unknown target '" + std::string(text) +
                          "' (this kiln builds for: cpu, cpu:x86-64-v2 .. cpu:x86-64-v4, cuda:sm_XX, cuda:compute_XX)");
}

}  // namespace kiln::builders

namespace kiln::builders {

std::vector<int> cuda_archs(const Target& target) { return cuda_archs_in(target.arch); }

}  // namespace kiln::builders
