#include "jit/hiprtc/hiprtc_wire.h"

#include <cstdlib>

namespace kiln::jit {
namespace {

// Fields as "<length>\n<bytes>"; lists as a count, then their fields.
void put(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += '\n';
  out += s;
}

class Reader {
 public:
  explicit Reader(std::string_view in) : m_in(in) {}
  bool number(size_t& n) {
    size_t nl = m_in.find('\n');
    if (nl == std::string_view::npos || nl == 0 || nl > 12) return false;
    for (size_t i = 0; i < nl; ++i)
      if (m_in[i] < '0' || m_in[i] > '9') return false;
    n = std::strtoull(std::string(m_in.substr(0, nl)).c_str(), nullptr, 10);
    m_in.remove_prefix(nl + 1);
    return true;
  }
  bool field(std::string& out) {
    size_t n = 0;
    if (!number(n) || n > m_in.size()) return false;
    out.assign(m_in.substr(0, n));
    m_in.remove_prefix(n);
    return true;
  }
  bool list(std::vector<std::string>& out) {
    size_t n = 0;
    if (!number(n) || n > 100000) return false;
    out.resize(n);
    for (auto& s : out)
      if (!field(s)) return false;
    return true;
  }
  bool pairs(std::vector<std::pair<std::string, std::string>>& out) {
    size_t n = 0;
    if (!number(n) || n > 100000) return false;
    out.resize(n);
    for (auto& [a, b] : out)
      if (!field(a) || !field(b)) return false;
    return true;
  }
  bool done() const { return m_in.empty(); }

 private:
  std::string_view m_in;
};

void put_list(std::string& out, const std::vector<std::string>& v) {
  out += std::to_string(v.size()) + "\n";
  for (auto& s : v) put(out, s);
}

void put_pairs(std::string& out, const std::vector<std::pair<std::string, std::string>>& v) {
  out += std::to_string(v.size()) + "\n";
  for (auto& [a, b] : v) {
    put(out, a);
    put(out, b);
  }
}

}  // namespace

std::string encode_hiprtc_request(const HiprtcRequest& r) {
  std::string out = "KILNHIPRTC-REQ1\n";
  put(out, r.library);
  put(out, r.arch);
  put_list(out, r.options);
  put(out, r.source_name);
  put(out, r.source);
  put_pairs(out, r.headers);
  put_list(out, r.name_expressions);
  return out;
}

Result<HiprtcRequest> decode_hiprtc_request(std::string_view in) {
  constexpr std::string_view magic = "KILNHIPRTC-REQ1\n";
  if (in.substr(0, magic.size()) != magic) return Status(StatusCode::kDataLoss, "not a kiln hiprtc request");
  Reader r(in.substr(magic.size()));
  HiprtcRequest q;
  if (!r.field(q.library) || !r.field(q.arch) || !r.list(q.options) || !r.field(q.source_name) || !r.field(q.source) ||
      !r.pairs(q.headers) || !r.list(q.name_expressions) || !r.done())
    return Status(StatusCode::kDataLoss, "a malformed kiln hiprtc request");
  return q;
}

std::string encode_hiprtc_reply(const HiprtcReply& r) {
  std::string out = "KILNHIPRTC-REP1\n";
  put(out, r.success ? "1" : "0");
  put(out, r.error);
  put(out, r.log);
  put(out, r.code);
  put_pairs(out, r.lowered_names);
  put(out, r.version);
  return out;
}

Result<HiprtcReply> decode_hiprtc_reply(std::string_view in) {
  constexpr std::string_view magic = "KILNHIPRTC-REP1\n";
  if (in.substr(0, magic.size()) != magic) return Status(StatusCode::kDataLoss, "not a kiln hiprtc reply");
  Reader r(in.substr(magic.size()));
  HiprtcReply p;
  std::string ok;
  if (!r.field(ok) || !r.field(p.error) || !r.field(p.log) || !r.field(p.code) || !r.pairs(p.lowered_names) || !r.field(p.version) ||
      !r.done())
    return Status(StatusCode::kDataLoss, "a malformed kiln hiprtc reply");
  p.success = ok == "1";
  return p;
}

}  // namespace kiln::jit
