#include "cache/cache_key.h"

#include <cstdint>

namespace kiln::cache {

static void put_u64(Hasher128& h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));  // little-endian everywhere
  h.update(b, 8);
}

KeyBuilder::KeyBuilder(std::string_view purpose) {
  add("kiln-key-schema", std::to_string(k_key_schema_version));
  add("purpose", purpose);
}

KeyBuilder& KeyBuilder::add(std::string_view field, std::string_view value) {
  put_u64(m_hasher, field.size());
  m_hasher.update(field);
  put_u64(m_hasher, value.size());
  m_hasher.update(value);
  return *this;
}

KeyBuilder& KeyBuilder::add(std::string_view field, const Hash128& value) {
  return add(field, std::string_view(reinterpret_cast<const char*>(value.bytes.data()), value.bytes.size()));
}

}  // namespace kiln::cache
