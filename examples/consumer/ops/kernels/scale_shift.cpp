#include <kiln/cpu_kernel.h>

// One block covers block_dim.x consecutive elements.
void scale_shift(const kiln::cpu::Block& blk, const float* x, float* y, float alpha, float beta, int64_t n) {
  int64_t begin = int64_t(blk.block_idx.x) * blk.block_dim.x;
  int64_t end = begin + blk.block_dim.x < n ? begin + blk.block_dim.x : n;
  for (int64_t i = begin; i < end; ++i) y[i] = alpha * x[i] + beta;
}
