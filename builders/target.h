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

// The compute capabilities of a CUDA target, ascending: cuda:sm_80,sm_90 -> {80, 90}.
std::vector<int> cuda_archs(const Target& target);

}  // namespace kiln::builders
