// A large artifact's chunk list (cache/remote_chunks.h) on any bytes: a list or kDataLoss, never
// a crash or an allocation sized by a count or a total it has not bounded; a list that parses
// adds up.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/remote_chunks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  constexpr size_t k_cap = size_t{1} << 30;
  auto list = kiln::cache::parse_chunk_list(bytes, k_cap);
  if (!list.ok()) {
    if (list.status().code() != kiln::StatusCode::kDataLoss) __builtin_trap();
    return 0;
  }
  if (list->total > k_cap || list->chunks.empty() || 56 + list->chunks.size() * 36 != size) __builtin_trap();
  uint64_t offset = 0;
  for (auto& c : list->chunks) {
    if (c.offset != offset || c.size == 0 || c.size > (size_t{64} << 20)) __builtin_trap();
    offset += c.size;
  }
  if (offset != list->total) __builtin_trap();
  return 0;
}
