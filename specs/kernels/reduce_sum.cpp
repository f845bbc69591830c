// The sum of each `chunk` consecutive elements (the last chunk may be shorter): one block per
// chunk, its partial sum written out (deterministic, unlike one atomic total). The CUDA
// version reduces with CUB's BlockReduce.
#include "kiln_ops/common.h"

void reduce_sum(const kiln::cpu::Block& b, const float* __restrict x, float* __restrict partial, int64_t n, int64_t chunk) {
  int64_t begin = static_cast<int64_t>(b.block_idx.x) * chunk, end = begin + chunk < n ? begin + chunk : n;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = begin; i < end; ++i) sum += x[i];
  partial[b.block_idx.x] = sum;
}

void reduce_sum_reference(const float* x, float* partial, int64_t n, int64_t chunk) {
  for (int64_t c = 0; c * chunk < n; ++c) {
    double sum = 0;
    for (int64_t i = c * chunk; i < n && i < (c + 1) * chunk; ++i) sum += x[i];
    partial[c] = static_cast<float>(sum);
  }
}
