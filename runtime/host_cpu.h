// The instruction-set level of the running CPU, as the x86-64 psABI names them
// (x86-64, x86-64-v2, -v3, -v4). A CPU target carries a level; the level enters the
// cache key, and an artifact for a level the running CPU lacks is never loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::runtime {

// 1 = baseline x86-64, 2..4 = x86-64-v2..v4; capped by $KILN_CPU_LEVEL when that is lower.
int host_x86_level();

// "x86-64", "x86-64-v2", ...
std::string x86_level_name(int level);
// Inverse of x86_level_name; nullopt for anything else.
std::optional<int> parse_x86_level(std::string_view name);

// Host memory that new allocations can have without swapping: MemAvailable from /proc/meminfo
// (free memory plus what the page cache would give back), else sysinfo's free + buffers.
uint64_t host_available_memory();

}  // namespace kiln::runtime
