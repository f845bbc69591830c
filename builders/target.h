// A compile target: a backend and an architecture, written "cpu:x86-64-v3".
// "cpu" alone means the running CPU's level, as detected.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::builders {

struct Target {
  std::string backend;  // "cpu"
  std::string arch;     // "x86-64-v3"
  std::string str() const { return backend + ":" + arch; }
  bool operator==(const Target&) const = default;
};

Result<Target> parse_target(std::string_view text);

// What a code-generation flag (-m...) asks of a CPU: the x86-64 level whose instruction sets
// include the one it enables (2 for -msse4.2, 3 for -mavx2, 4 for -mavx512f), 0 for a flag that
// enables none (-mno-avx512f, -mprefer-vector-width=256). kInvalidArgument, saying why, for a
// flag outside those levels (-mamx-tile, -mavx512fp16) or one kiln does not know: an artifact
// built with it could not say which CPUs may load it.
Result<int> cpu_level_for_flag(std::string_view flag);

// The target an op's artifact is built for: `asked`, with a cpu level raised to what the op's
// flags need (an op built with -mavx512f is an x86-64-v4 artifact whatever level was asked,
// so a CPU without AVX-512 refuses it before loading instead of dying of SIGILL).
Target effective_target(const std::vector<std::string>& flags, const Target& asked);

// The compute capabilities of a CUDA target, ascending: cuda:sm_80,sm_90 -> {80, 90}.
std::vector<int> cuda_archs(const Target& target);

}  // namespace kiln::builders
