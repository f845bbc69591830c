// The blob reader on any bytes: content or kDataLoss, never a crash or a huge allocation.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/blob.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  auto content = kiln::cache::decode_blob(file);
  if (!content.ok() && content.status().code() != kiln::StatusCode::kDataLoss) __builtin_trap();
  if (content.ok() && kiln::cache::decode_blob(kiln::cache::encode_blob(content.value()).bytes).value() != content.value())
    __builtin_trap();
  // Round trip of the input itself as content.
  if (kiln::cache::decode_blob(kiln::cache::encode_blob(file).bytes).value() != file) __builtin_trap();
  return 0;
}
