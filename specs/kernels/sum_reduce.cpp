#include "kiln_ops/common.h"

// out[0] += sum(x): each block sums its slice in double, then adds it atomically. The slice is
// summed in SIMD lanes (omp simd: one chain of dependent adds ran at 0.8 ns per element on one
// core, a fifth of what memory delivers), so the order of the additions is not the array's.
void sum_reduce(const kiln::cpu::Block& blk, const float* __restrict x, double* out, int64_t n) {
  kiln_ops::Range r = kiln_ops::block_range(blk, n);
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = r.begin; i < r.end; ++i) s += x[i];
  kiln_ops::atomic_add(out, s);
}

void sum_reduce_reference(const float* x, double* out, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  out[0] += s;
}
