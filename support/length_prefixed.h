// Length-prefixed fields, "<decimal length>\n<bytes>", and counts, "<decimal>\n": the framing of
// kiln's small binary messages and artifact containers (opencl-program artifacts, the hiprtc
// helper's request and reply). A reader refuses anything malformed or longer than what is left.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace kiln {

inline void put_count(std::string& out, size_t n) {
  out += std::to_string(n);
  out += '\n';
}

inline void put_field(std::string& out, std::string_view bytes) {
  put_count(out, bytes.size());
  out += bytes;
}

class FieldReader {
 public:
  explicit FieldReader(std::string_view in) : m_in(in) {}
  // A count of at most 12 digits.
  bool count(size_t& out) {
    size_t nl = m_in.find('\n');
    if (nl == std::string_view::npos || nl == 0 || nl > 12) return false;
    for (size_t i = 0; i < nl; ++i)
      if (m_in[i] < '0' || m_in[i] > '9') return false;
    out = std::strtoull(std::string(m_in.substr(0, nl)).c_str(), nullptr, 10);
    m_in.remove_prefix(nl + 1);
    return true;
  }
  bool field(std::string& out) {
    size_t n = 0;
    if (!count(n) || n > m_in.size()) return false;
    out.assign(m_in.substr(0, n));
    m_in.remove_prefix(n);
    return true;
  }
  // The same without a copy: `out` views the input.
  bool field_view(std::string_view& out) {
    size_t n = 0;
    if (!count(n) || n > m_in.size()) return false;
    out = m_in.substr(0, n);
    m_in.remove_prefix(n);
    return true;
  }
  bool done() const { return m_in.empty(); }

 private:
  std::string_view m_in;
};

}  // namespace kiln
