#include "jit/hiprtc/hiprtc_wire.h"

#include "support/length_prefixed.h"

namespace kiln::jit {
namespace {

// Lists as a count, then their fields (support/length_prefixed.h).
bool read_list(FieldReader& r, std::vector<std::string>& out) {
  size_t n = 0;
  if (!r.count(n) || n > 100000) return false;
  out.resize(n);
  for (auto& s : out)
    if (!r.field(s)) return false;
  return true;
}

bool read_pairs(FieldReader& r, std::vector<std::pair<std::string, std::string>>& out) {
  size_t n = 0;
  if (!r.count(n) || n > 100000) return false;
  out.resize(n);
  for (auto& [a, b] : out)
    if (!r.field(a) || !r.field(b)) return false;
  return true;
}

void put_list(std::string& out, const std::vector<std::string>& v) {
  put_count(out, v.size());
  for (auto& s : v) put_field(out, s);
}

void put_pairs(std::string& out, const std::vector<std::pair<std::string, std::string>>& v) {
  put_count(out, v.size());
  for (auto& [a, b] : v) {
    put_field(out, a);
    put_field(out, b);
  }
}

}  // namespace

std::string encode_hiprtc_request(const HiprtcRequest& r) {
  std::string out = "KILNHIPRTC-REQ1\n";
  put_field(out, r.library);
  put_field(out, r.arch);
  put_list(out, r.options);
  put_field(out, r.source_name);
  put_field(out, r.source);
  put_pairs(out, r.headers);
  put_list(out, r.name_expressions);
  return out;
}

Result<HiprtcRequest> decode_hiprtc_request(std::string_view in) {
  constexpr std::string_view magic = "KILNHIPRTC-REQ1\n";
  if (in.substr(0, magic.size()) != magic) return Status(StatusCode::kDataLoss, "not a kiln hiprtc request");
  FieldReader r(in.substr(magic.size()));
  HiprtcRequest q;
  if (!r.field(q.library) || !r.field(q.arch) || !read_list(r, q.options) || !r.field(q.source_name) || !r.field(q.source) ||
      !read_pairs(r, q.headers) || !read_list(r, q.name_expressions) || !r.done())
    return Status(StatusCode::kDataLoss, "a malformed kiln hiprtc request");
  return q;
}

std::string encode_hiprtc_reply(const HiprtcReply& r) {
  std::string out = "KILNHIPRTC-REP1\n";
  put_field(out, r.success ? "1" : "0");
  put_field(out, r.error);
  put_field(out, r.log);
  put_field(out, r.code);
  put_pairs(out, r.lowered_names);
  put_field(out, r.version);
  return out;
}

Result<HiprtcReply> decode_hiprtc_reply(std::string_view in) {
  constexpr std::string_view magic = "KILNHIPRTC-REP1\n";
  if (in.substr(0, magic.size()) != magic) return Status(StatusCode::kDataLoss, "not a kiln hiprtc reply");
  FieldReader r(in.substr(magic.size()));
  HiprtcReply p;
  std::string ok;
  if (!r.field(ok) || !r.field(p.error) || !r.field(p.log) || !r.field(p.code) || !read_pairs(r, p.lowered_names) || !r.field(p.version) ||
      !r.done())
    return Status(StatusCode::kDataLoss, "a malformed kiln hiprtc reply");
  p.success = ok == "1";
  return p;
}

}  // namespace kiln::jit
