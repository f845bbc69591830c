#include "kiln_ops/common.h"

// y = alpha * x + beta * y (BLAS axpby), in place.
void axpby(const kiln::cpu::Block& blk, float alpha, const float* __restrict x, float beta, float* __restrict y,
           int64_t n) {
  kiln_ops::Range r = kiln_ops::block_range(blk, n);
  for (int64_t i = r.begin; i < r.end; ++i) y[i] = alpha * x[i] + beta * y[i];
}

void axpby_reference(float alpha, const float* x, float beta, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(double(alpha) * x[i] + double(beta) * y[i]);
}
