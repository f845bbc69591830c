// The cache key of DESIGN.md: XXH3-128 over a versioned, length-prefixed encoding of named
// fields. Length prefixes make the encoding unambiguous ("ab"+"c" never equals "a"+"bc"),
// and the schema version lets a future encoding change every key at once.
#pragma once

#include <string>
#include <string_view>

#include "support/hash.h"

namespace kiln::cache {

// Bump when the meaning or encoding of any field changes.
inline constexpr int k_key_schema_version = 1;

class KeyBuilder {
 public:
  // Starts with the schema version and a purpose tag ("input", "artifact"), so keys built
  // for different purposes from the same fields never collide.
  explicit KeyBuilder(std::string_view purpose);
  KeyBuilder& add(std::string_view field, std::string_view value);
  KeyBuilder& add(std::string_view field, const Hash128& value);
  Hash128 finish() const { return m_hasher.digest(); }

 private:
  Hasher128 m_hasher;
};

}  // namespace kiln::cache
