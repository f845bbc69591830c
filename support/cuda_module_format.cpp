#include "support/cuda_module_format.h"

#include <cstdlib>

namespace kiln {

std::string encode_cuda_module(const CudaModuleImage& m) {
  std::string out = "KILNCUDA2\n" + std::to_string(m.cubins.size()) + "\n";
  for (auto& [sm, cubin] : m.cubins) out += std::to_string(sm) + "\n" + std::to_string(cubin.size()) + "\n" + cubin;
  out += std::to_string(m.ptx_sm) + "\n" + std::to_string(m.ptx.size()) + "\n" + m.ptx;
  return out;
}

Result<CudaModuleImage> decode_cuda_module(std::string_view in) {
  auto bad = [] { return Status(StatusCode::kDataLoss, "not a kiln CUDA module"); };
  auto number = [&](unsigned long long& out) -> bool {
    size_t nl = in.find('\n');
    if (nl == std::string_view::npos || nl == 0 || nl > 20) return false;
    std::string text(in.substr(0, nl));
    char* end = nullptr;
    out = std::strtoull(text.c_str(), &end, 10);
    in.remove_prefix(nl + 1);
    return *end == '\0';
  };
  auto bytes = [&](std::string& out) -> bool {
    unsigned long long n = 0;
    if (!number(n) || n > in.size()) return false;
    out.assign(in.substr(0, n));
    in.remove_prefix(n);
    return true;
  };
  if (in.substr(0, 10) != "KILNCUDA2\n") return bad();
  in.remove_prefix(10);
  CudaModuleImage m;
  unsigned long long count = 0, sm = 0;
  if (!number(count) || count > 64) return bad();
  for (unsigned long long i = 0; i < count; ++i) {
    if (!number(sm) || sm > 1000 || !bytes(m.cubins[static_cast<int>(sm)])) return bad();
  }
  if (!number(sm) || sm > 1000 || !bytes(m.ptx) || !in.empty()) return bad();
  m.ptx_sm = static_cast<int>(sm);
  return m;
}

std::string_view pick_cuda_code(const CudaModuleImage& m, int device_sm, bool* is_cubin, int* sm_used) {
  const std::string* best = nullptr;
  for (auto& [sm, cubin] : m.cubins) {
    if (sm / 10 == device_sm / 10 && sm <= device_sm && !cubin.empty()) {
      best = &cubin;
      *sm_used = sm;
    }
  }
  if (best) {
    *is_cubin = true;
    return *best;
  }
  *is_cubin = false;
  if (!m.ptx.empty() && m.ptx_sm <= device_sm) {
    *sm_used = m.ptx_sm;
    return m.ptx;
  }
  return {};
}

}  // namespace kiln
