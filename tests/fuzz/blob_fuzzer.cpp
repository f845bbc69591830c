// The blob reader on any bytes: content or kDataLoss, never a crash or a huge allocation.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/blob.h"
#include "cache/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  auto content = kiln::cache::decode_blob(file);
  if (!content.ok() && content.status().code() != kiln::StatusCode::kDataLoss) __builtin_trap();
  if (content.ok()) {
    auto again = kiln::cache::decode_blob(kiln::cache::encode_blob(content->content, content->metadata).bytes).value();
    if (again.content != content->content || again.metadata != content->metadata) __builtin_trap();
    (void)kiln::cache::decode_record(content->metadata);  // metadata is parsed on index rebuilds
  }
  // Round trip of the input itself, as content and as metadata.
  auto self = kiln::cache::decode_blob(kiln::cache::encode_blob(file, file).bytes).value();
  if (self.content != file || self.metadata != file) __builtin_trap();
  return 0;
}
