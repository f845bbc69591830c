// A CUDA fat binary ("fatbin"): the container that CUDA's runtime registers through
// __cudaRegisterFatBinary, holding a cubin per GPU architecture and PTX for the driver to
// compile on newer ones. Clang's host-side CUDA compile embeds a file of these bytes as it is
// (-fcuda-include-gpubinary, section .nv_fatbin) and registers it at load; nvcc and Clang's
// driver make it with the toolkit's `fatbinary` program. Kiln writes it itself, in-process.
//
// The layout is not documented by NVIDIA; this is what `fatbinary --compress=false` of CUDA 13.0
// writes (checked byte for byte in tests/support/cuda_fatbin_test.cpp where the tool exists),
// all little-endian:
//
//   header, 16 bytes:  u32 magic 0xBA55ED50, u16 version 1, u16 header size 16,
//                      u64 size of everything after the header
//   then per entry:    a header (64 bytes for a cubin, 80 for PTX), then its payload padded
//                      with zeros to a multiple of 8
//   entry header:      u16 kind (1 PTX, 2 ELF cubin), u16 0x0101, u32 header size,
//                      u64 payload size (padded), u32 0 (compressed size: not compressed),
//                      u32 options offset (PTX: 0x40; cubin: 0), u16 minor, u16 major
//                      (cubin: 1 and the ELF's EI_ABIVERSION; PTX: its .version),
//                      u32 sm (90), u32 0, u32 0 (object name offset, length),
//                      u64 flags 0x11 (64-bit code, Linux host), u64 0, u64 0
//   PTX only, at 0x40: u32 0x48 (where the ptxas options string is), u32 0 (its length:
//                      none), 8 zero bytes
//   PTX payload:       the text and a NUL.
//
// A compressed entry, in the layout CUDA 13's `fatbinary --compress-all` writes (and nvcc by
// default for PTX and for cubins with line tables; kiln, for images of 4 KiB and more): the payload is one zstd frame (with its content size,
// no checksum), padded to 8; the u32 at 0x10 is the frame's size, flags has 0x8000 (zstd) added,
// and the u64 at 0x38 is the image's size before compression (PTX: the text and its NUL,
// unpadded). CUDA 12's fatbinary compressed with LZ4 instead (flag 0x2000); its driver may not
// read zstd, so a caller compresses only for a CUDA 13 toolkit, whose cubins need a CUDA 13
// driver anyway.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln {

struct FatbinImage {
  enum class Kind { kPtx = 1, kCubin = 2 };
  Kind kind = Kind::kCubin;
  int sm = 0;              // 90 for sm_90 / compute_90
  std::string_view bytes;  // a cubin (ELF), or PTX text
  // A decoded image that was compressed: `bytes` point into this. The `{}` lets an image be
  // written {kind, sm, bytes} without g++'s -Wmissing-field-initializers.
  std::shared_ptr<const std::string> decompressed{};
};

enum class FatbinCompression {
  kNone,
  // zstd, for each image of at least 4 KiB that it makes smaller: nvcc leaves a cubin without
  // line tables uncompressed, but a library's cubins (mamba-ssm's selective scan: 4.8 MB)
  // shrink 5-6x, and zstd reads them back at ~1 GB/s (`zstd -b5` here: 4.7 ms for that one).
  kZstd,
};

// The fat binary of `images`, in order. kInvalidArgument for a cubin that is not a 64-bit ELF,
// or PTX without a .version line.
Result<std::string> encode_fatbin(const std::vector<FatbinImage>& images, FatbinCompression compression = FatbinCompression::kNone);

// The images of a fat binary written by encode_fatbin (or by `fatbinary`, compressed with zstd
// or not): kind, sm and payload (PTX without its NUL and padding). kDataLoss for anything else,
// including an LZ4 entry, a payload that is not one whole zstd frame, one that would decompress
// to other than the size its header says, and images that come to more than 1 GiB together.
Result<std::vector<FatbinImage>> decode_fatbin(std::string_view bytes);

}  // namespace kiln
