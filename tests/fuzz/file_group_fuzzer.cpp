// The file-group reader on any bytes (a group's blob from a remote tier or a bundle): files or
// kDataLoss, never a crash or an allocation sized by a count it has not bounded; what decodes
// re-encodes to the same bytes, and its files pass the name checks.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/file_group.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto files = kiln::cache::decode_file_group(bytes);
  if (!files.ok()) {
    if (files.status().code() != kiln::StatusCode::kDataLoss) __builtin_trap();
    if (kiln::cache::placed_size_of(bytes)) __builtin_trap();  // the size cap reads it alike
    return 0;
  }
  if (!kiln::cache::check_file_names(files.value()).ok()) __builtin_trap();
  // Counts are canonical decimal, so what decodes is the encoding of its files (leading zeros in
  // a count or a length decode too, and re-encode without them).
  std::string again = kiln::cache::encode_file_group(files.value());
  auto back = kiln::cache::decode_file_group(again);
  if (!back.ok() || back.value() != files.value() || again.size() > bytes.size()) __builtin_trap();
  if (!kiln::cache::placed_size_of(bytes)) __builtin_trap();
  return 0;
}
