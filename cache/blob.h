// The format of one blob file: a fixed header, the artifact's metadata, then its content,
// each zstd-compressed (fast level) when it is 4 KiB or more and that saves at least a quarter:
// for smaller savings, or smaller sections, decoding costs more time than the bytes are worth
// (blob.cpp, k_compress_from). Every read checks sizes and both hashes.
// A compressed section is one zstd frame, then, for content that compresses past 256:1 (a run of
// zeros), a zstd skippable frame that pads it to 1/256 of its raw size: a reader refuses a denser
// section before allocating anything (a small blob must not decode to gigabytes; blob.cpp has the
// bounds), and zstd readers skip the padding.
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
#include <optional>
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

// Whether the content may be compressed: when that pays (the default), or never, for content
// read on every compile that uses it, which Store::map then reads in place instead of copying.
enum class Compression { kWhenItPays, kNone };

EncodedBlob encode_blob(std::string_view content, std::string_view metadata = {},
                        Compression compression = Compression::kWhenItPays);

struct DecodedBlob {
  std::string content;
  std::string metadata;
};

// The content and metadata, or kDataLoss naming what is wrong (truncated, bad magic, size
// or hash mismatch, undecodable payload, a section past the bounds). Never trusts a size field
// before checking it: a declared size is checked against the bounds and the bytes at hand before
// anything is allocated, and a compressed section's output grows only as its frame produces it.
// `with_metadata` false skips decoding and checking the metadata (the hit path reads its
// fields from the index; verify and rebuild_index check it).
Result<DecodedBlob> decode_blob(std::string_view file, bool with_metadata = true);

// The same checks without copying the content: `content` views `file` when the content is stored
// as is, and is empty (std::nullopt) when it is compressed (then decode_blob decodes it).
struct BlobInPlace {
  std::string metadata;
  std::optional<std::string_view> content;
};
Result<BlobInPlace> decode_blob_in_place(std::string_view file);

// The hash of the raw content a blob's header records (check the blob with decode_blob first).
Hash128 blob_content_hash(std::string_view file);

}  // namespace kiln::cache
