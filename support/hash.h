// 128-bit content hashes (XXH3-128) and their hex form. Keys, blob checksums and header
// manifests all use this one type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

struct Hash128 {
  std::array<uint8_t, 16> bytes{};

  std::string hex() const;
  static std::optional<Hash128> from_hex(std::string_view hex);
  bool operator==(const Hash128&) const = default;
  auto operator<=>(const Hash128&) const = default;
};

// Lower-case hex digits of `size` bytes (Hash128::hex, ELF build ids).
std::string to_hex(const void* data, size_t size);

Hash128 xxh3_128(const void* data, size_t size);
inline Hash128 xxh3_128(std::string_view s) { return xxh3_128(s.data(), s.size()); }

// Streaming XXH3-128, for hashing a sequence of fields without concatenating them.
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Hash128 digest() const;

 private:
  void* m_state;  // XXH3_state_t, kept opaque so xxhash.h stays out of headers
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const {
    size_t v;
    static_assert(sizeof(v) <= sizeof(h.bytes));
    __builtin_memcpy(&v, h.bytes.data(), sizeof(v));
    return v;
  }
};

}  // namespace kiln
