#include "support/cuda_toolkit.h"

#include <algorithm>
#include <cstdlib>

namespace kiln {

std::vector<std::string> cuda_toolkit_roots() {
  std::vector<std::string> out;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  if (std::find(out.begin(), out.end(), "/usr/local/cuda") == out.end()) out.push_back("/usr/local/cuda");
  return out;
}

std::string cuda_toolkit_root() { return cuda_toolkit_roots().front(); }

std::vector<int> cuda_archs_in(std::string_view target) {
  std::vector<int> out;
  for (size_t pos = 0; (pos = target.find("sm_", pos)) != std::string_view::npos; pos += 3)
    out.push_back(std::atoi(std::string(target.substr(pos + 3, 4)).c_str()));
  if (auto pos = target.find("compute_"); pos != std::string_view::npos)
    out.push_back(std::atoi(std::string(target.substr(pos + 8, 4)).c_str()));
  return out;
}

bool cuda_ptx_only(std::string_view target) { return target.find("compute_") != std::string_view::npos; }

}  // namespace kiln
