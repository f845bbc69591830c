// Helpers shared by the bundled CPU kernels. Kept free of standard headers: parsing
// <cmath> or <atomic> costs more than compiling a small kernel (TOOLCHAIN-FACTS.md).
#pragma once

#include <kiln/cpu_kernel.h>

namespace kiln_ops {

struct Range {
  int64_t begin, end;
};

// The elements [begin, end) of a 1-D problem of size n that this block's threads cover.
inline Range block_range(const kiln::cpu::Block& b, int64_t n) {
  int64_t begin = static_cast<int64_t>(b.block_idx.x) * b.block_dim.x;
  int64_t end = begin + b.block_dim.x;
  if (begin > n) begin = n;
  if (end > n) end = n;
  return {begin, end};
}

// *target += value, atomically (blocks of one launch run concurrently).
inline void atomic_add(double* target, double value) {
  uint64_t* bits = reinterpret_cast<uint64_t*>(target);
  uint64_t old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    double current = __builtin_bit_cast(double, old);
    uint64_t desired = __builtin_bit_cast(uint64_t, current + value);
    if (__atomic_compare_exchange_n(bits, &old, desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
  }
}

}  // namespace kiln_ops
