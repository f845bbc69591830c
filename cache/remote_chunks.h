// The chunk list a large artifact's object holds on a tier (format: remote_chunks.cpp).
// Exposed for its fuzz target and tests; RemoteTiers is its only other user.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "cache/trust.h"
#include "support/status.h"

namespace kiln::cache {

struct ChunkRef {
  Sha256 hash{};  // its bytes' SHA-256, which names it on the tier
  size_t offset = 0, size = 0;
};

struct ChunkList {
  uint64_t total = 0;
  Sha256 whole{};
  std::vector<ChunkRef> chunks;
};

// kDataLoss saying what is wrong: a bad header, a count the bytes do not hold, an empty or
// oversized chunk, sizes that do not add up, or a total over `max_total`. Allocates only in
// proportion to the list's own size.
Result<ChunkList> parse_chunk_list(std::string_view list, size_t max_total);

}  // namespace kiln::cache
