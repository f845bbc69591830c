#include "support/cuda_fatbin.h"

#include <cstdlib>

#include "support/little_endian.h"

namespace kiln {
namespace {

constexpr uint32_t k_magic = 0xBA55ED50u;
constexpr uint64_t k_flags = 0x11;  // 64-bit code, Linux host
constexpr uint32_t k_cubin_header = 64, k_ptx_header = 80;

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

}  // namespace

Result<std::string> encode_fatbin(const std::vector<FatbinImage>& images) {
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
    const uint32_t header = ptx ? k_ptx_header : k_cubin_header;
    put_le(body, ptx ? 1 : 2, 2);
    put_le(body, 0x0101, 2);
    put_le(body, header, 4);
    put_le(body, padded(payload), 8);
    put_le(body, 0, 4);               // compressed size: not compressed
    put_le(body, ptx ? 0x40 : 0, 4);  // where the options are
    put_le(body, static_cast<uint64_t>(minor), 2);
    put_le(body, static_cast<uint64_t>(major), 2);
    put_le(body, static_cast<uint64_t>(image.sm), 4);
    put_le(body, 0, 4);  // object name offset
    put_le(body, 0, 4);  // object name length
    put_le(body, k_flags, 8);
    put_le(body, 0, 8);
    put_le(body, 0, 8);  // uncompressed size: not compressed
    if (ptx) {
      put_le(body, 0x48, 4);  // the options string: at 0x48, empty
      put_le(body, 0, 4);
      put_le(body, 0, 8);
    }
    body.append(image.bytes);
    body.append(padded(payload) - image.bytes.size(), '\0');
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
  size_t at = 16, end = 16 + size;
  while (at < end) {
    if (end - at < 64) return bad("an entry is cut short");
    uint64_t kind = get_le(bytes, at, 2), entry_header = get_le(bytes, at + 4, 4), payload = get_le(bytes, at + 8, 8);
    if (get_le(bytes, at + 16, 4) != 0) return bad("an entry is compressed");
    if (entry_header < 64 || entry_header > end - at || payload > end - at - entry_header) return bad("an entry's size is wrong");
    if (kind != 1 && kind != 2) return bad("an entry of kind " + std::to_string(kind));
    FatbinImage image;
    image.kind = kind == 1 ? FatbinImage::Kind::kPtx : FatbinImage::Kind::kCubin;
    image.sm = static_cast<int>(get_le(bytes, at + 28, 4));
    image.bytes = bytes.substr(at + entry_header, payload);
    if (kind == 1) image.bytes = image.bytes.substr(0, image.bytes.find('\0'));
    out.push_back(image);
    at += entry_header + payload;
  }
  return out;
}

}  // namespace kiln
