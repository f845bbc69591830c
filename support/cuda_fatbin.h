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
#pragma once

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
};

// The fat binary of `images`, in order. kInvalidArgument for a cubin that is not a 64-bit ELF,
// or PTX without a .version line.
Result<std::string> encode_fatbin(const std::vector<FatbinImage>& images);

// The images of a fat binary written by encode_fatbin (or by `fatbinary` without compression):
// kind, sm and payload (PTX without its NUL and padding). kDataLoss for anything else.
Result<std::vector<FatbinImage>> decode_fatbin(std::string_view bytes);

}  // namespace kiln
