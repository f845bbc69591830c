#include "kiln_ops/common.h"

// out[i] = a[i] + b[i]; one block covers block_dim.x consecutive elements.
void vector_add(const kiln::cpu::Block& blk, const float* __restrict a, const float* __restrict b,
                float* __restrict out, int64_t n) {
  kiln_ops::Range r = kiln_ops::block_range(blk, n);
  for (int64_t i = r.begin; i < r.end; ++i) out[i] = a[i] + b[i];
}

void vector_add_reference(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
