// Runs an op's [check]: random inputs, one launch of the entry point, one call of the plain
// reference on copies of the same inputs, outputs compared element by element.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "builders/ops.h"

namespace kiln::builders {

struct CheckReport {
  bool passed = false;
  std::string message;        // what differed, or a short summary
  uint64_t elements_compared = 0;
  double max_abs_error = 0;
  uint64_t grid = 0;          // blocks launched
  double kernel_ms = 0;       // the launch, including waiting for it
};

struct CheckOptions {
  std::map<std::string, int64_t> dims;  // override the spec's dims
  uint64_t seed = 1;
};

// kInvalidArgument when the op has no [check] or the dims make no sense; a mismatch is a
// report with passed == false. The reference always runs on the host: for an op loaded on
// another accelerator, `ops` loads the same op's cpu artifact for it.
Result<CheckReport> run_self_check(Ops& ops, const LoadedOp& op, const CheckOptions& options = {});

}  // namespace kiln::builders
