#include "cache/blob.h"

#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "support/little_endian.h"

namespace kiln::cache {
namespace {

constexpr char k_magic[8] = {'K', 'I', 'L', 'N', 'B', 'L', 'O', 'B'};
constexpr uint32_t k_format_version = k_blob_format_version;
// Codec bits: content compressed, metadata compressed (each only when that pays).
constexpr uint32_t k_content_zstd = 1, k_metadata_zstd = 2;
// zstd's fast level -1, measured on 100 KiB of x86 code from libLLVM (this machine,
// 2026-11-22): 1.62x in 39 us to decode, where the default level 3 gives 1.92x but takes
// 73 us and level 19 2.17x in 97 us. Decoding is on every hit; the extra 15% of space is not
// worth doubling it.
constexpr int k_zstd_level = -1;
// Refuse sizes beyond these: a flipped size field must not allocate gigabytes.
constexpr uint64_t k_max_raw_size = uint64_t{4} << 30;

}  // namespace

// zstd of `in` when smaller, else nothing.
std::optional<std::string> compress(std::string_view in) {
  // Contexts are reused per thread: creating one costs more than decoding a small blob.
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  std::string out(ZSTD_compressBound(in.size()), '\0');
  size_t n = ZSTD_compressCCtx(ctx.get(), out.data(), out.size(), in.data(), in.size(), k_zstd_level);
  if (ZSTD_isError(n) || n > in.size() / 4 * 3) return std::nullopt;
  out.resize(n);
  return out;
}

// Decompresses a zstd frame whose size must be `expected` (checked before allocating).
Result<std::string> decompress(std::string_view frame, uint64_t expected, const char* what) {
  unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size != expected) return Status(StatusCode::kDataLoss, std::string("damaged blob: ") + what + " frame size does not match the header");
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  std::string out(expected, '\0');
  size_t n = ZSTD_decompressDCtx(ctx.get(), out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n) || n != expected)
    return Status(StatusCode::kDataLoss, std::string("damaged blob: ") + what + ": " + (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short"));
  return out;
}

EncodedBlob encode_blob(std::string_view content, std::string_view metadata, ContentCodec content_codec) {
  EncodedBlob blob;
  blob.content_hash = xxh3_128(content);
  auto packed_content = content_codec == ContentCodec::kStored ? std::nullopt : compress(content);
  auto packed_meta = compress(metadata);
  std::string_view payload = packed_content ? std::string_view(*packed_content) : content;
  std::string_view meta = packed_meta ? std::string_view(*packed_meta) : metadata;
  uint32_t codec = (packed_content ? k_content_zstd : 0) | (packed_meta ? k_metadata_zstd : 0);

  std::string& out = blob.bytes;
  out.reserve(k_blob_header_size + metadata.size() + payload.size());
  out.append(k_magic, sizeof k_magic);
  put_le(out, k_format_version, 4);
  put_le(out, codec, 4);
  put_le(out, content.size(), 8);
  put_le(out, payload.size(), 8);
  put_hash(out, blob.content_hash);
  put_le(out, metadata.size(), 8);
  put_hash(out, xxh3_128(metadata));
  put_le(out, meta.size(), 8);
  out.append(meta);
  out.append(payload);
  return blob;
}

Result<DecodedBlob> decode_blob(std::string_view file, bool with_metadata, bool in_place) {
  auto damaged = [](std::string what) { return Status(StatusCode::kDataLoss, "damaged blob: " + what); };
  if (file.size() < k_blob_header_size)
    return damaged("truncated header (" + std::to_string(file.size()) + " bytes)");
  if (std::memcmp(file.data(), k_magic, sizeof k_magic) != 0) return damaged("bad magic");
  if (uint64_t v = get_le(file, 8, 4); v != k_format_version) return damaged("unknown format version " + std::to_string(v));
  uint64_t codec = get_le(file, 12, 4);
  uint64_t raw_size = get_le(file, 16, 8);
  uint64_t stored_size = get_le(file, 24, 8);
  uint64_t meta_size = get_le(file, 48, 8);
  uint64_t meta_stored = get_le(file, 72, 8);
  if (codec > (k_content_zstd | k_metadata_zstd)) return damaged("unknown codec " + std::to_string(codec));
  std::string_view rest = file.substr(k_blob_header_size);
  if (meta_stored > rest.size() || stored_size != rest.size() - meta_stored)
    return damaged("sections are " + std::to_string(rest.size()) + " bytes, header says " + std::to_string(meta_stored) +
                   " + " + std::to_string(stored_size));
  if (raw_size > k_max_raw_size || meta_size > k_max_raw_size) return damaged("implausible size");
  std::string_view meta = rest.substr(0, meta_stored), payload = rest.substr(meta_stored);
  DecodedBlob out;
  if (!with_metadata) {
    // Not decoded.
  } else if (codec & k_metadata_zstd) {
    KILN_ASSIGN_OR_RETURN(out.metadata, decompress(meta, meta_size, "metadata"));
  } else {
    if (meta_size != meta_stored) return damaged("metadata size mismatch");
    out.metadata.assign(meta);
  }
  if (with_metadata && xxh3_128(out.metadata) != get_hash(file, 56)) return damaged("metadata hash mismatch");
  if (codec & k_content_zstd) {
    KILN_ASSIGN_OR_RETURN(out.content, decompress(payload, raw_size, "content"));
  } else {
    if (raw_size != stored_size) return damaged("size mismatch in an uncompressed blob");
    if (in_place)
      out.stored = payload;
    else
      out.content.assign(payload);
  }
  if (xxh3_128(out.view()) != get_hash(file, 32)) return damaged("content hash mismatch");
  return out;
}

Hash128 blob_content_hash(std::string_view file) {
  if (file.size() < k_blob_header_size) return {};
  return get_hash(file, 32);
}

uint32_t blob_format_version(std::string_view file) {
  if (file.size() < 12 || std::memcmp(file.data(), k_magic, sizeof k_magic) != 0) return 0;
  return static_cast<uint32_t>(get_le(file, 8, 4));
}

}  // namespace kiln::cache
