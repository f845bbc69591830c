// The cache key of DESIGN.md: XXH3-128 over a versioned, length-prefixed encoding of named
// fields. Length prefixes make the encoding unambiguous ("ab"+"c" never equals "a"+"bc"),
// and the schema version lets a future encoding change every key at once.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/hash.h"

namespace kiln::cache {

// Bump when the meaning or encoding of any field changes.
inline constexpr int k_key_schema_version = 2;

class KeyBuilder {
 public:
  // Starts with the schema version and a purpose tag ("input", "artifact"), so keys built
  // for different purposes from the same fields never collide.
  // `keep_components`: also remember what went in (for storing with an artifact and for
  // `kiln cache explain`); lookups leave it off, it costs a second hash of every source.
  explicit KeyBuilder(std::string_view purpose, bool keep_components = false);
  KeyBuilder& add(std::string_view field, std::string_view value);
  KeyBuilder& add(std::string_view field, const Hash128& value);
  Hash128 finish() const { return m_hasher.digest(); }

  // What went in, one (field, value) per add(): short printable values as they are, others
  // as "#" + the hex of their hash. Kept with an artifact so `kiln cache explain` can say
  // which input differs from the nearest stored entry.
  const std::vector<std::pair<std::string, std::string>>& components() const { return m_components; }

 private:
  Hasher128 m_hasher;
  bool m_keep_components;
  std::vector<std::pair<std::string, std::string>> m_components;
};

// Components as text ("field\tvalue\n" lines; values never hold tabs or newlines) and back.
std::string encode_components(const std::vector<std::pair<std::string, std::string>>& components);
std::vector<std::pair<std::string, std::string>> decode_components(std::string_view text);

}  // namespace kiln::cache
