// The format of one blob file: a fixed header that carries the content's size and XXH3-128,
// then the payload, zstd-compressed when that makes it smaller. Every read checks it all.
//
//   offset  size  field
//   0       8     magic "KILNBLOB"
//   8       4     format version (1), little-endian
//   12      4     codec: 0 stored as is, 1 zstd
//   16      8     raw size
//   24      8     stored (payload) size
//   32      16    XXH3-128 of the raw content
//   48      ...   payload
#pragma once

#include <string>
#include <string_view>

#include "support/hash.h"
#include "support/status.h"

namespace kiln::cache {

inline constexpr size_t k_blob_header_size = 48;

struct EncodedBlob {
  std::string bytes;     // the whole file
  Hash128 content_hash;  // of the raw content
};

EncodedBlob encode_blob(std::string_view content);

// The raw content, or kDataLoss naming what is wrong (truncated, bad magic, size or hash
// mismatch, undecodable payload). Never trusts a size field before checking it.
Result<std::string> decode_blob(std::string_view file);

}  // namespace kiln::cache
