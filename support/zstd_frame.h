// One zstd frame decompressed to exactly the size its holder says, with memory that grows only as
// the frame produces: the loop a blob section (cache/blob.cpp) and a compressed fat binary entry
// (support/cuda_fatbin.cpp) share. Their bytes may come from another node or a file another user
// wrote, so a few bytes claiming gigabytes must cost what they really decompress to.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

struct ZstdFrameLimits {
  size_t first_output_bytes;  // the output's first size (capped at the expected size), then doubling
  int max_window_log;         // the largest window the frame may ask of the decoder
};

// `frame` (one whole zstd frame, checked by the caller against its own bounds before calling)
// decompressed to exactly `expected` bytes. kDataLoss, naming `what`, when its content size is
// not `expected`, when it produces more or less, or when zstd refuses it. A decoding context is
// kept per thread (making one asks the CPU for its features: CPUID, ~11 us each in a VM).
Result<std::string> zstd_decompress_exact(std::string_view frame, uint64_t expected, ZstdFrameLimits limits,
                                          const std::string& what);

}  // namespace kiln
