#include "support/opencl_program_format.h"

#include "support/length_prefixed.h"

namespace kiln {

namespace {

constexpr std::string_view k_magic = "KILNOCL1\n";

bool valid_kinds(const std::string& params) {
  for (char c : params)
    if (c != k_opencl_global && c != k_opencl_constant && c != k_opencl_local && c != k_opencl_value) return false;
  return true;
}

}  // namespace

std::string encode_opencl_program(const OpenClProgramImage& p) {
  std::string out(k_magic);
  put_count(out, p.kernels.size());
  for (auto& k : p.kernels) {
    put_field(out, k.name);
    put_field(out, k.params);
    for (uint32_t size : k.value_sizes) put_count(out, size);
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
  size_t count = 0;
  if (!r.count(count) || count > 4096) return bad();
  for (size_t i = 0; i < count; ++i) {
    OpenClKernelInfo k;
    if (!r.field(k.name) || k.name.empty() || !r.field(k.params) || k.params.size() > 256 || !valid_kinds(k.params)) return bad();
    for (size_t j = 0; j < k.params.size(); ++j) {
      size_t size = 0;
      if (!r.count(size) || size == 0 || size > 256) return bad();
      k.value_sizes.push_back(static_cast<uint32_t>(size));
    }
    p.kernels.push_back(std::move(k));
  }
  if (!r.field(p.build_options) || !r.field(p.spirv) || !r.field(p.source) || !r.done()) return bad();
  if (p.spirv.empty() && p.source.empty()) return bad();
  return p;
}

}  // namespace kiln
