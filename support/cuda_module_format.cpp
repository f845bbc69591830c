#include "support/cuda_module_format.h"

#include <cstdlib>

namespace kiln {

std::string encode_cuda_module(const CudaModuleImage& m) {
  std::string out = "KILNCUDA1\n" + m.arch + "\n";
  auto put = [&](const std::string& s) {
    out += std::to_string(s.size()) + "\n";
    out += s;
  };
  put(m.cubin);
  put(m.ptx);
  return out;
}

Result<CudaModuleImage> decode_cuda_module(std::string_view in) {
  auto bad = [] { return Status(StatusCode::kDataLoss, "not a kiln CUDA module"); };
  CudaModuleImage m;
  auto line = [&](std::string& out) -> bool {
    size_t nl = in.find('\n');
    if (nl == std::string_view::npos) return false;
    out.assign(in.substr(0, nl));
    in.remove_prefix(nl + 1);
    return true;
  };
  std::string magic, size;
  if (!line(magic) || magic != "KILNCUDA1" || !line(m.arch)) return bad();
  for (std::string* part : {&m.cubin, &m.ptx}) {
    if (!line(size)) return bad();
    char* end = nullptr;
    unsigned long long n = std::strtoull(size.c_str(), &end, 10);
    if (size.empty() || *end || n > in.size()) return bad();
    part->assign(in.substr(0, n));
    in.remove_prefix(n);
  }
  if (!in.empty()) return bad();
  return m;
}

}  // namespace kiln
