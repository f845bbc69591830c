#include "cache/blob.h"

#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "support/little_endian.h"
#include "support/zstd_frame.h"

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

// ---- Bounds on what a blob's sizes may say, checked before anything is allocated: a blob comes
// from a remote tier or a bundle as well as from this store, and a 99-byte blob whose header and
// zstd frame declared 4 GiB once cost 4 GiB (issue 44).
//
// The largest raw section: a flipped size field must not allocate gigabytes. The largest
// artifacts kiln keeps are precompiled headers (torch/extension.h's: 173 MB) and host libraries
// (libkiln.so itself, were it an artifact: 70 MB).
constexpr uint64_t k_max_raw_size = uint64_t{4} << 30;
// Raw bytes per stored byte of a compressed section. zstd's format allows ~28,000:1 (10 MB of
// zeros in 359 bytes at level -1) and more with crafted frames; artifacts are far below this:
// libkiln.so 2.4:1, libLLVM 2.7:1, and text (Triton's IR, diagnostics) ~10:1 (zstd --fast=1, this
// machine, 2026-12). So what a section costs in memory is at most 256 times the bytes its sender
// delivered, and below k_max_raw_size. Content denser than this (a run of zeros) is padded to
// it by the encoder with a skippable frame (compress()), so no blob kiln writes is refused.
constexpr uint64_t k_max_zstd_ratio = 256;
// A compressed section is decoded into memory that grows with what the frame really produces,
// never past its declared size: a first step of what its stored size holds at 16:1 (above every
// ratio measured for artifacts, so they decode in one step, straight from the frame: zstd's
// single-pass shortcut, as fast as before), at least 8 MiB; then doubling. A frame that declares
// more must produce it before it gets more memory.
constexpr uint64_t k_first_step_ratio = 16;
constexpr uint64_t k_first_output_bytes = uint64_t{8} << 20;
// The largest window a frame may ask of the decoder (2^23 = 8 MiB): level -1 uses 2^19 at most
// (a single-segment frame: its content size, at most 2^19 too); zstd's own default allows 2^27.
constexpr int k_max_window_log = 23;
// A zstd skippable frame (RFC 8878, 3.1.2): magic 0x184D2A50-5F, 4-byte size, that many bytes.
constexpr uint32_t k_skippable_magic = 0x184D2A50;
constexpr size_t k_skippable_header = 8;

// The smallest stored size a section of `raw` bytes may have.
uint64_t min_stored_size(uint64_t raw) { return (raw + k_max_zstd_ratio - 1) / k_max_zstd_ratio; }

// True for what may follow a section's zstd frame: nothing, or one skippable frame (padding).
bool is_padding(std::string_view rest) {
  if (rest.empty()) return true;
  if (rest.size() < k_skippable_header) return false;
  return get_le(rest, 0, 4) == k_skippable_magic && get_le(rest, 4, 4) == rest.size() - k_skippable_header;
}

Status damaged(const std::string& what) { return Status(StatusCode::kDataLoss, "damaged blob: " + what); }

// A section smaller than this is kept as it is. Compressed, it would save at most one 4 KiB disk
// block, usually none (the blob's other section and its 80-byte header share the file), and
// reading it back would need a zstd decoding context, whose creation asks the CPU for its
// features (CPUID: about 11 us each in a VM, three of them): 35 us of a hit process's 0.9 ms
// above its start.
constexpr size_t k_compress_from = 4096;

// zstd of `in` when smaller, else nothing. Padded to at least min_stored_size(in.size()).
std::optional<std::string> compress(std::string_view in) {
  if (in.size() < k_compress_from) return std::nullopt;
  // Contexts are reused per thread: creating one costs more than decoding a small blob.
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  std::string out(ZSTD_compressBound(in.size()), '\0');
  size_t n = ZSTD_compressCCtx(ctx.get(), out.data(), out.size(), in.data(), in.size(), k_zstd_level);
  if (ZSTD_isError(n)) return std::nullopt;
  out.resize(n);
  if (uint64_t floor = min_stored_size(in.size()); n < floor) {
    size_t pad = std::max<size_t>(floor - n, k_skippable_header) - k_skippable_header;
    put_le(out, k_skippable_magic, 4);
    put_le(out, pad, 4);
    out.append(pad, '\0');
  }
  if (out.size() > in.size() / 4 * 3) return std::nullopt;
  return out;
}

// Decompresses a section whose raw size the header says is `expected`: the sizes are checked
// (against k_max_raw_size, the section's stored size times k_max_zstd_ratio, and the frame's own
// header) before anything is allocated, and the output grows only as the frame produces it,
// never past `expected`.
Result<std::string> decompress(std::string_view section, uint64_t expected, const char* what) {
  const std::string name = std::string(what);
  if (expected > k_max_raw_size) return damaged(name + " of " + std::to_string(expected) + " bytes is implausible");
  if (expected > section.size() * k_max_zstd_ratio)
    return damaged(name + " would be " + std::to_string(expected) + " bytes from " + std::to_string(section.size()) +
                   ", more than " + std::to_string(k_max_zstd_ratio) + " times its stored size");
  size_t frame_size = ZSTD_findFrameCompressedSize(section.data(), section.size());
  if (ZSTD_isError(frame_size) || frame_size > section.size()) return damaged(name + " is not a whole zstd frame");
  if (!is_padding(section.substr(frame_size))) return damaged(name + " has bytes after its zstd frame");
  auto out = zstd_decompress_exact(section.substr(0, frame_size), expected,
                                   {std::max(k_first_output_bytes, section.size() * k_first_step_ratio), k_max_window_log}, name);
  if (!out.ok() && out.status().code() == StatusCode::kDataLoss) return damaged(out.status().message());
  return out;
}

}  // namespace

EncodedBlob encode_blob(std::string_view content, std::string_view metadata, Compression compression) {
  EncodedBlob blob;
  blob.content_hash = xxh3_128(content);
  auto packed_content = compression == Compression::kNone ? std::nullopt : compress(content);
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

namespace {

// A blob's sections, their sizes checked against the file and its metadata decoded and checked
// (when asked); the content is left to the caller.
struct Sections {
  uint64_t codec = 0, raw_size = 0, stored_size = 0;
  std::string_view payload;
  std::string metadata;
};

Result<Sections> read_sections(std::string_view file, bool with_metadata) {
  if (file.size() < k_blob_header_size)
    return damaged("truncated header (" + std::to_string(file.size()) + " bytes)");
  if (std::memcmp(file.data(), k_magic, sizeof k_magic) != 0) return damaged("bad magic");
  if (uint64_t v = get_le(file, 8, 4); v != k_format_version) return damaged("unknown format version " + std::to_string(v));
  Sections out;
  out.codec = get_le(file, 12, 4);
  out.raw_size = get_le(file, 16, 8);
  out.stored_size = get_le(file, 24, 8);
  uint64_t meta_size = get_le(file, 48, 8);
  uint64_t meta_stored = get_le(file, 72, 8);
  if (out.codec > (k_content_zstd | k_metadata_zstd)) return damaged("unknown codec " + std::to_string(out.codec));
  std::string_view rest = file.substr(k_blob_header_size);
  if (meta_stored > rest.size() || out.stored_size != rest.size() - meta_stored)
    return damaged("sections are " + std::to_string(rest.size()) + " bytes, header says " + std::to_string(meta_stored) +
                   " + " + std::to_string(out.stored_size));
  if (out.raw_size > k_max_raw_size || meta_size > k_max_raw_size) return damaged("implausible size");
  std::string_view meta = rest.substr(0, meta_stored);
  out.payload = rest.substr(meta_stored);
  if (!with_metadata) {
    // Not decoded.
  } else if (out.codec & k_metadata_zstd) {
    KILN_ASSIGN_OR_RETURN(out.metadata, decompress(meta, meta_size, "metadata"));
  } else {
    if (meta_size != meta_stored) return damaged("metadata size mismatch");
    out.metadata.assign(meta);
  }
  if (with_metadata && xxh3_128(out.metadata) != get_hash(file, 56)) return damaged("metadata hash mismatch");
  if (!(out.codec & k_content_zstd) && out.raw_size != out.stored_size) return damaged("size mismatch in an uncompressed blob");
  return out;
}

}  // namespace

Result<DecodedBlob> decode_blob(std::string_view file, bool with_metadata) {
  KILN_ASSIGN_OR_RETURN(Sections sections, read_sections(file, with_metadata));
  DecodedBlob out;
  out.metadata = std::move(sections.metadata);
  if (sections.codec & k_content_zstd) {
    KILN_ASSIGN_OR_RETURN(out.content, decompress(sections.payload, sections.raw_size, "content"));
  } else {
    out.content.assign(sections.payload);
  }
  if (xxh3_128(out.content) != get_hash(file, 32)) return damaged("content hash mismatch");
  return out;
}

Result<BlobInPlace> decode_blob_in_place(std::string_view file) {
  KILN_ASSIGN_OR_RETURN(Sections sections, read_sections(file, /*with_metadata=*/true));
  BlobInPlace out;
  out.metadata = std::move(sections.metadata);
  if (sections.codec & k_content_zstd) return out;
  if (xxh3_128(sections.payload) != get_hash(file, 32)) return damaged("content hash mismatch");
  out.content = sections.payload;
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
