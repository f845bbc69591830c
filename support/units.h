// Sizes as people write them: "5G", "512M", "100k", "1.5GiB", "4096" (bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

// Binary multiples (k = 1024). kInvalidArgument for anything else.
Result<uint64_t> parse_size(std::string_view text);
// "4.0 KiB", "5.0 GiB", "12 B".
std::string human_size(uint64_t bytes);

}  // namespace kiln
