// Fixed-width little-endian fields and 16-byte hashes in kiln's binary formats (blobs, bundles,
// artifact metadata): one encoding, written once, whatever the host's byte order.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "support/hash.h"

namespace kiln {

// Appends the low `bytes` bytes of `v`, least significant first.
inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>(v >> (8 * i));
}

// Reads `bytes` bytes at `at` (the caller has checked they are there).
inline uint64_t get_le(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}

inline void put_hash(std::string& out, const Hash128& h) { out.append(reinterpret_cast<const char*>(h.bytes.data()), h.bytes.size()); }

inline Hash128 get_hash(std::string_view in, size_t at) {
  Hash128 h;
  std::memcpy(h.bytes.data(), in.data() + at, h.bytes.size());
  return h;
}

}  // namespace kiln
