// Why is an op a miss? Compare what its key would be made of now with what the stored
// entries for the same op and target were made of, and name what differs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "builders/ops.h"

namespace kiln::builders {

struct Explanation {
  std::string op, target;
  bool cached = false;            // the current inputs are a hit
  std::optional<Hash128> key;     // known when the inputs' header manifest is known
  size_t stored_entries = 0;      // for this op and target
  struct Nearest {
    Hash128 key;
    int64_t created = 0;
    std::string kind;
    std::vector<std::string> differences;  // "define: 'A=1' -> 'A=2'", "header spec:x.h: content differs"
  };
  std::optional<Nearest> nearest;
};

Result<Explanation> explain_miss(Ops& ops, const OpSpec& spec, const Target& target);

}  // namespace kiln::builders
