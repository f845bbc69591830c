// The launch a spec gives an op on a backend, for sizes known only when it is called: what the
// self-check launches, and what the API launches when its caller names no grid (Op::launch_for).
//
//   block: [cuda] block (cuda and hip targets), [opencl] block, else [check] block;
//   grid:  [cuda] grid (cuda and hip), else [check] grid;
//   shared memory: [check] shared_bytes.
// Their expressions (builders/expr.h) see the sizes given (the check's dims fill in those not
// given), `block`, and `sm_count`: the device's multiprocessor count
// (runtime::Accelerator::multiprocessor_count), so a grid can be sized to the device.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "builders/spec.h"
#include "runtime/accelerator.h"
#include "support/status.h"

namespace kiln::builders {

// The names every launch expression sees besides the sizes.
inline constexpr std::string_view k_block_name = "block";
inline constexpr std::string_view k_sm_count_name = "sm_count";

struct LaunchShape {
  runtime::LaunchConfig config;
  // The names the expressions saw: the sizes, the check's other dims, block and sm_count.
  std::map<std::string, int64_t> names;
};

// kInvalidArgument, naming the op and the expression, when the spec gives no grid (no [check]),
// an expression fails (an unknown name, a division by zero), or a result is out of range (a grid
// under 1 block or past 32 bits, shared memory over 4 GiB).
// `block` non-zero replaces the spec's block. `sizes` may hold names no expression uses.
Result<LaunchShape> spec_launch(const OpSpec& spec, std::string_view backend, int sm_count, const std::map<std::string, int64_t>& sizes,
                                uint32_t block = 0);

}  // namespace kiln::builders
