// The format of one blob file: a fixed header, the artifact's metadata, then its content,
// each zstd-compressed (fast level) when that saves at least a quarter: for smaller
// savings decoding costs more time than the bytes are worth. Every read checks sizes and both hashes.
// The metadata makes a blob self-describing, so a lost or corrupt index can be rebuilt
// from the blobs alone (Store::rebuild_index).
//
//   offset  size  field
//   0       8     magic "KILNBLOB"
//   8       4     format version (2), little-endian
//   12      4     codec bits: 1 content is zstd, 2 metadata is zstd (each only when smaller)
//   16      8     raw content size
//   24      8     stored content (payload) size
//   32      16    XXH3-128 of the raw content
//   48      8     raw metadata size
//   56      16    XXH3-128 of the raw metadata
//   72      8     stored metadata size
//   80      ...   metadata, then payload
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "support/hash.h"
#include "support/status.h"

namespace kiln::cache {

inline constexpr size_t k_blob_header_size = 80;
inline constexpr uint32_t k_blob_format_version = 2;

// The format version a blob file says it has; 0 when it is not a blob at all.
uint32_t blob_format_version(std::string_view file);

struct EncodedBlob {
  std::string bytes;     // the whole file
  Hash128 content_hash;  // of the raw content
};

// How a blob's content is kept: zstd when that makes it smaller (the default), or as it is, for
// content every use reads whole and soon (a precompiled header: decompressing torch's 133 MB one
// cost 150 ms of each 2.5 s compile that used it, reading it as it is ~10 ms).
enum class ContentCodec { kZstdWhenSmaller, kStored };

EncodedBlob encode_blob(std::string_view content, std::string_view metadata = {},
                        ContentCodec codec = ContentCodec::kZstdWhenSmaller);

struct DecodedBlob {
  std::string content;
  std::string metadata;
  // Content stored as it is, left in place (decode_blob's `in_place`): a view into the file
  // given, which must outlive it; `content` is then empty.
  std::string_view stored;
  std::string_view view() const { return stored.data() ? stored : std::string_view(content); }
};

// The content and metadata, or kDataLoss naming what is wrong (truncated, bad magic, size
// or hash mismatch, undecodable payload). Never trusts a size field before checking it.
// `with_metadata` false skips decoding and checking the metadata (the hit path reads its
// fields from the index; verify and rebuild_index check it). `in_place` leaves content stored
// as it is where it is (`stored`) instead of copying it (a precompiled header: 10-133 MB read
// from a mapped file); compressed content is decoded into `content` either way.
Result<DecodedBlob> decode_blob(std::string_view file, bool with_metadata = true, bool in_place = false);

// The hash of the raw content a blob's header records (check the blob with decode_blob first).
Hash128 blob_content_hash(std::string_view file);

}  // namespace kiln::cache
