#include "support/cuda_fatbin.h"

#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include "support/little_endian.h"
#include "support/zstd_frame.h"

namespace kiln {
namespace {

constexpr uint32_t k_magic = 0xBA55ED50u;
constexpr uint64_t k_flags = 0x11;  // 64-bit code, Linux host
constexpr uint64_t k_zstd_flag = 0x8000, k_lz4_flag = 0x2000;
constexpr uint32_t k_cubin_header = 64, k_ptx_header = 80;
constexpr size_t k_compress_from = 4096;
constexpr uint64_t k_max_image = uint64_t{1} << 30;  // what decode_fatbin decompresses at most, all images together
// A compressed entry decodes into 1 MiB first, then doubling as its frame produces, with the
// windows zstd allows by default (2^27; fatbinary's and kiln's frames use 2^21).
constexpr uint64_t k_first_output_bytes = uint64_t{1} << 20;
constexpr int k_max_window_log = 27;
// fatbinary's default level gives within 0.1% of these bytes; 2 MiB windows as its frames have.
constexpr int k_zstd_level = 5, k_zstd_window_log = 21;

size_t padded(size_t n) { return (n + 7) & ~size_t{7}; }

// "9.0" from the PTX's ".version 9.0" line: {major, minor}.
bool ptx_version(std::string_view ptx, int& major, int& minor) {
  size_t at = ptx.find(".version ");
  if (at == std::string_view::npos || (at > 0 && ptx[at - 1] != '\n')) return false;
  std::string text(ptx.substr(at + 9, 16));
  char* end = nullptr;
  major = static_cast<int>(std::strtol(text.c_str(), &end, 10));
  if (end == text.c_str() || *end != '.') return false;
  const char* minor_text = end + 1;
  minor = static_cast<int>(std::strtol(minor_text, &end, 10));
  return end != minor_text;
}

// One zstd frame of `in`, or nullopt when it would not be smaller.
std::optional<std::string> zstd_frame(std::string_view in) {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (!ctx) return std::nullopt;
  ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_compressionLevel, k_zstd_level);
  ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_windowLog, k_zstd_window_log);
  ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_checksumFlag, 0);
  ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_contentSizeFlag, 1);
  std::string out(ZSTD_compressBound(in.size()), '\0');
  size_t n = ZSTD_compress2(ctx.get(), out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(n) || n >= in.size() || n > UINT32_MAX) return std::nullopt;
  out.resize(n);
  return out;
}

}  // namespace

Result<std::string> encode_fatbin(const std::vector<FatbinImage>& images, FatbinCompression compression) {
  std::string body;
  for (const FatbinImage& image : images) {
    const bool ptx = image.kind == FatbinImage::Kind::kPtx;
    int major = 0, minor = 0;
    size_t payload = 0;
    if (ptx) {
      if (!ptx_version(image.bytes, major, minor))
        return invalid_argument("the PTX for compute_" + std::to_string(image.sm) + " has no .version line");
      payload = image.bytes.size() + 1;  // the text and its NUL
    } else {
      // A 64-bit little-endian ELF; its EI_ABIVERSION is the code version's minor.
      if (image.bytes.size() < 16 || image.bytes.substr(0, 4) != "\x7f" "ELF" || image.bytes[4] != 2 || image.bytes[5] != 1)
        return invalid_argument("the cubin for sm_" + std::to_string(image.sm) + " is not a 64-bit ELF file");
      major = 1;
      minor = static_cast<unsigned char>(image.bytes[8]);
      payload = image.bytes.size();
    }
    std::optional<std::string> frame;
    if (compression == FatbinCompression::kZstd && payload >= k_compress_from) {
      // PTX with its NUL, as the driver reads it back.
      frame = ptx ? zstd_frame(std::string(image.bytes) + '\0') : zstd_frame(image.bytes);
    }
    const uint32_t header = ptx ? k_ptx_header : k_cubin_header;
    put_le(body, ptx ? 1 : 2, 2);
    put_le(body, 0x0101, 2);
    put_le(body, header, 4);
    put_le(body, padded(frame ? frame->size() : payload), 8);
    put_le(body, frame ? frame->size() : 0, 4);  // compressed size
    put_le(body, ptx ? 0x40 : 0, 4);             // where the options are
    put_le(body, static_cast<uint64_t>(minor), 2);
    put_le(body, static_cast<uint64_t>(major), 2);
    put_le(body, static_cast<uint64_t>(image.sm), 4);
    put_le(body, 0, 4);  // object name offset
    put_le(body, 0, 4);  // object name length
    put_le(body, frame ? k_flags | k_zstd_flag : k_flags, 8);
    put_le(body, 0, 8);
    put_le(body, frame ? payload : 0, 8);  // uncompressed size
    if (ptx) {
      put_le(body, 0x48, 4);  // the options string: at 0x48, empty
      put_le(body, 0, 4);
      put_le(body, 0, 8);
    }
    if (frame) {
      body.append(*frame);
      body.append(padded(frame->size()) - frame->size(), '\0');
    } else {
      body.append(image.bytes);
      body.append(padded(payload) - image.bytes.size(), '\0');
    }
  }
  std::string out;
  put_le(out, k_magic, 4);
  put_le(out, 1, 2);
  put_le(out, 16, 2);
  put_le(out, body.size(), 8);
  return out + body;
}

Result<std::vector<FatbinImage>> decode_fatbin(std::string_view bytes) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kDataLoss, "not a CUDA fat binary: " + why); };
  if (bytes.size() < 16 || get_le(bytes, 0, 4) != k_magic) return bad("no fatbin header");
  uint64_t header = get_le(bytes, 6, 2), size = get_le(bytes, 8, 8);
  if (header != 16 || size > bytes.size() - 16) return bad("its size is wrong");
  std::vector<FatbinImage> out;
  uint64_t unpacked_total = 0;  // what the compressed entries decompress to, all together
  size_t at = 16, end = 16 + size;
  while (at < end) {
    if (end - at < 64) return bad("an entry is cut short");
    uint64_t kind = get_le(bytes, at, 2), entry_header = get_le(bytes, at + 4, 4), payload = get_le(bytes, at + 8, 8);
    if (entry_header < 64 || entry_header > end - at || payload > end - at - entry_header) return bad("an entry's size is wrong");
    if (kind != 1 && kind != 2) return bad("an entry of kind " + std::to_string(kind));
    const uint64_t compressed = get_le(bytes, at + 16, 4), flags = get_le(bytes, at + 40, 8), unpacked = get_le(bytes, at + 56, 8);
    FatbinImage image;
    image.kind = kind == 1 ? FatbinImage::Kind::kPtx : FatbinImage::Kind::kCubin;
    image.sm = static_cast<int>(get_le(bytes, at + 28, 4));
    image.bytes = bytes.substr(at + entry_header, payload);
    if (flags & k_lz4_flag) return bad("an entry is compressed with LZ4 (CUDA 12's fatbinary), which kiln does not read");
    if (flags & k_zstd_flag) {
      // Checked before anything is allocated: the header's sizes, the frame's own (its blocks
      // walked: one whole frame, nothing after it), and 1 GiB for the whole fat binary.
      if (compressed == 0 || compressed > payload) return bad("a compressed entry's size is wrong");
      std::string_view frame = image.bytes.substr(0, compressed);
      if (ZSTD_findFrameCompressedSize(frame.data(), frame.size()) != compressed)
        return bad("a compressed entry is not one whole zstd frame");
      if (unpacked == 0 || unpacked > k_max_image - unpacked_total) return bad("a compressed entry's size is wrong, or the images come to over 1 GiB");
      unpacked_total += unpacked;
      auto decoded = zstd_decompress_exact(frame, unpacked, {k_first_output_bytes, k_max_window_log}, "a compressed entry");
      if (!decoded.ok()) return bad(decoded.status().message());
      image.decompressed = std::make_shared<const std::string>(std::move(decoded).value());
      image.bytes = *image.decompressed;
    } else if (compressed != 0) {
      return bad("an entry is compressed in a way kiln does not know");
    }
    if (kind == 1) image.bytes = image.bytes.substr(0, image.bytes.find('\0'));
    out.push_back(image);
    at += entry_header + payload;
  }
  return out;
}

}  // namespace kiln
