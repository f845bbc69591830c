#include "cache/cache_key.h"

#include <cstdint>

namespace kiln::cache {

static void put_u64(Hasher128& h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));  // little-endian everywhere
  h.update(b, 8);
}

KeyBuilder::KeyBuilder(std::string_view purpose, bool keep_components) : m_keep_components(keep_components) {
  add("kiln-key-schema", std::to_string(k_key_schema_version));
  add("purpose", purpose);
}

static bool printable(std::string_view v) {
  if (v.size() > 160) return false;
  for (char c : v)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  return true;
}

KeyBuilder& KeyBuilder::add(std::string_view field, std::string_view value) {
  if (m_keep_components)
    m_components.emplace_back(std::string(field), printable(value) ? std::string(value) : "#" + xxh3_128(value).hex());
  put_u64(m_hasher, field.size());
  m_hasher.update(field);
  put_u64(m_hasher, value.size());
  m_hasher.update(value);
  return *this;
}

KeyBuilder& KeyBuilder::add(std::string_view field, const Hash128& value) {
  add(field, std::string_view(reinterpret_cast<const char*>(value.bytes.data()), value.bytes.size()));
  if (m_keep_components) m_components.back().second = value.hex();
  return *this;
}

std::string encode_components(const std::vector<std::pair<std::string, std::string>>& components) {
  std::string out;
  for (auto& [f, v] : components) out += f + "\t" + v + "\n";
  return out;
}

std::vector<std::pair<std::string, std::string>> decode_components(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    size_t tab = line.find('\t');
    if (tab == std::string_view::npos) continue;
    out.emplace_back(std::string(line.substr(0, tab)), std::string(line.substr(tab + 1)));
  }
  return out;
}

}  // namespace kiln::cache
