#include "cache/blob.h"

#include <zstd.h>

#include <cstdint>
#include <cstring>

namespace kiln::cache {
namespace {

constexpr char k_magic[8] = {'K', 'I', 'L', 'N', 'B', 'L', 'O', 'B'};
constexpr uint32_t k_format_version = 1;
constexpr uint32_t k_codec_none = 0, k_codec_zstd = 1;
// Level 3 is zstd's default: host .so artifacts shrink ~3x, decompression ~1 GB/s.
constexpr int k_zstd_level = 3;
// Refuse raw sizes beyond this: a flipped size field must not allocate terabytes.
constexpr uint64_t k_max_raw_size = uint64_t{4} << 30;

void put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>(v >> (8 * i));
}
uint64_t get(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}

}  // namespace

EncodedBlob encode_blob(std::string_view content) {
  EncodedBlob blob;
  blob.content_hash = xxh3_128(content);
  std::string compressed(ZSTD_compressBound(content.size()), '\0');
  size_t n = ZSTD_compress(compressed.data(), compressed.size(), content.data(), content.size(), k_zstd_level);
  bool use_zstd = !ZSTD_isError(n) && n < content.size();
  std::string_view payload = use_zstd ? std::string_view(compressed.data(), n) : content;

  std::string& out = blob.bytes;
  out.reserve(k_blob_header_size + payload.size());
  out.append(k_magic, sizeof k_magic);
  put(out, k_format_version, 4);
  put(out, use_zstd ? k_codec_zstd : k_codec_none, 4);
  put(out, content.size(), 8);
  put(out, payload.size(), 8);
  out.append(reinterpret_cast<const char*>(blob.content_hash.bytes.data()), 16);
  out.append(payload);
  return blob;
}

Result<std::string> decode_blob(std::string_view file) {
  auto damaged = [](std::string what) { return Status(StatusCode::kDataLoss, "damaged blob: " + what); };
  if (file.size() < k_blob_header_size)
    return damaged("truncated header (" + std::to_string(file.size()) + " bytes)");
  if (std::memcmp(file.data(), k_magic, sizeof k_magic) != 0) return damaged("bad magic");
  if (uint64_t v = get(file, 8, 4); v != k_format_version) return damaged("unknown format version " + std::to_string(v));
  uint64_t codec = get(file, 12, 4);
  uint64_t raw_size = get(file, 16, 8);
  uint64_t stored_size = get(file, 24, 8);
  Hash128 expected;
  std::memcpy(expected.bytes.data(), file.data() + 32, 16);
  std::string_view payload = file.substr(k_blob_header_size);
  if (stored_size != payload.size())
    return damaged("payload is " + std::to_string(payload.size()) + " bytes, header says " + std::to_string(stored_size));
  if (raw_size > k_max_raw_size) return damaged("implausible size " + std::to_string(raw_size));

  std::string content;
  if (codec == k_codec_none) {
    if (raw_size != stored_size) return damaged("size mismatch in an uncompressed blob");
    content.assign(payload);
  } else if (codec == k_codec_zstd) {
    // The frame records its own content size: check it against the header before
    // allocating, so a damaged size field cannot make us allocate and zero gigabytes.
    unsigned long long frame_size = ZSTD_getFrameContentSize(payload.data(), payload.size());
    if (frame_size != raw_size) return damaged("zstd frame size does not match the header");
    content.resize(raw_size);
    size_t n = ZSTD_decompress(content.data(), content.size(), payload.data(), payload.size());
    if (ZSTD_isError(n)) return damaged(std::string("zstd: ") + ZSTD_getErrorName(n));
    if (n != raw_size) return damaged("decompressed to " + std::to_string(n) + " bytes, expected " + std::to_string(raw_size));
  } else {
    return damaged("unknown codec " + std::to_string(codec));
  }
  if (xxh3_128(content) != expected) return damaged("content hash mismatch");
  return content;
}

}  // namespace kiln::cache
