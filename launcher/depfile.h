// Make-style dependency files, as GCC, Clang and nvcc write them for -MD/-MF (and ninja's
// `deps = gcc` reads them): rules of "targets: prerequisites", lines continued with a backslash,
// a space in a name written "\ ", '#' as "\#", '$' as "$$".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::launcher {

struct DepRule {
  std::vector<std::string> targets;
  std::vector<std::string> prerequisites;
};

// kInvalidArgument when the text is not rules of that form (a prerequisite before any ':').
Result<std::vector<DepRule>> parse_depfile(std::string_view text);
// Back to text, names escaped as the compilers escape them; parse_depfile(render_depfile(r)) == r.
std::string render_depfile(const std::vector<DepRule>& rules);

}  // namespace kiln::launcher
