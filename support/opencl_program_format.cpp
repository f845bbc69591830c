#include "support/opencl_program_format.h"

#include <cstdlib>

namespace kiln {

namespace {

constexpr std::string_view k_magic = "KILNOCL1\n";

void put_field(std::string& out, std::string_view bytes) {
  out += std::to_string(bytes.size());
  out += '\n';
  out += bytes;
}

// Reads the fields put_field wrote, refusing anything malformed or too long for what is left.
class FieldReader {
 public:
  explicit FieldReader(std::string_view in) : m_in(in) {}
  bool number(unsigned long long& out) {
    size_t nl = m_in.find('\n');
    if (nl == std::string_view::npos || nl == 0 || nl > 20) return false;
    for (size_t i = 0; i < nl; ++i)
      if (m_in[i] < '0' || m_in[i] > '9') return false;
    out = std::strtoull(std::string(m_in.substr(0, nl)).c_str(), nullptr, 10);
    m_in.remove_prefix(nl + 1);
    return true;
  }
  bool field(std::string& out) {
    unsigned long long n = 0;
    if (!number(n) || n > m_in.size()) return false;
    out.assign(m_in.substr(0, n));
    m_in.remove_prefix(n);
    return true;
  }
  bool done() const { return m_in.empty(); }

 private:
  std::string_view m_in;
};

bool valid_kinds(const std::string& params) {
  for (char c : params)
    if (c != k_opencl_global && c != k_opencl_constant && c != k_opencl_local && c != k_opencl_value) return false;
  return true;
}

}  // namespace

std::string encode_opencl_program(const OpenClProgramImage& p) {
  std::string out(k_magic);
  out += std::to_string(p.kernels.size()) + "\n";
  for (auto& k : p.kernels) {
    put_field(out, k.name);
    put_field(out, k.params);
    for (uint32_t size : k.value_sizes) out += std::to_string(size) + "\n";
  }
  put_field(out, p.build_options);
  put_field(out, p.spirv);
  put_field(out, p.source);
  return out;
}

Result<OpenClProgramImage> decode_opencl_program(std::string_view in) {
  auto bad = [] { return Status(StatusCode::kDataLoss, "not a kiln OpenCL program"); };
  if (in.substr(0, k_magic.size()) != k_magic) return bad();
  FieldReader r(in.substr(k_magic.size()));
  OpenClProgramImage p;
  unsigned long long count = 0;
  if (!r.number(count) || count > 4096) return bad();
  for (unsigned long long i = 0; i < count; ++i) {
    OpenClKernelInfo k;
    if (!r.field(k.name) || k.name.empty() || !r.field(k.params) || k.params.size() > 256 || !valid_kinds(k.params)) return bad();
    for (size_t j = 0; j < k.params.size(); ++j) {
      unsigned long long size = 0;
      if (!r.number(size) || size == 0 || size > 256) return bad();
      k.value_sizes.push_back(static_cast<uint32_t>(size));
    }
    p.kernels.push_back(std::move(k));
  }
  if (!r.field(p.build_options) || !r.field(p.spirv) || !r.field(p.source) || !r.done()) return bad();
  if (p.spirv.empty() && p.source.empty()) return bad();
  return p;
}

}  // namespace kiln
