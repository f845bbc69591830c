// Layer norm forward over the last dimension, as torch.nn.functional.layer_norm: each row is
// shifted by its mean, scaled by 1/sqrt(variance + eps), then by gamma, plus beta. One block
// per row; the mean and the variance are two passes over it (as PyTorch's CPU kernel does).
#include "kiln_ops/common.h"

namespace {
// Rows up to this many columns have their output lines fetched while the first pass reads the
// row (a row of x and one of y then sit in L2 together: 128 KiB at most). Without it, the first
// pass only reads and the last only writes: a profile (perf record, 16384 x 4096) put 45% of
// the time in the last pass's stores waiting for their lines and 25% in the first pass's loads.
// With it the op takes 0.67-0.78 of the time (launched turn about with the plain version in one
// process, 20 launches each, 4 runs), its sums added in the same order as before.
constexpr int64_t k_prefetch_row_columns = 16384;
}  // namespace

void layer_norm(const kiln::cpu::Block& b, const float* __restrict x, const float* __restrict gamma,
                const float* __restrict beta, float* __restrict y, int64_t rows, int64_t cols, float eps) {
  int64_t row = b.block_idx.x;
  if (row >= rows) return;
  const float* in = x + row * cols;
  float* out = y + row * cols;
  float sum = 0.f;
  if (cols <= k_prefetch_row_columns) {
    // 32 running sums, added up as the vectorised loop adds its four vectors of eight, two lines
    // of y fetched each step.
    float lanes[32] = {};
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
      __builtin_prefetch(out + c, 1);
      __builtin_prefetch(out + c + 16, 1);
      for (int l = 0; l < 32; ++l) lanes[l] += in[c + l];
    }
    for (int l = 0; c < cols; ++c, ++l) lanes[l] += in[c];
    for (int l = 0; l < 8; ++l) sum += (lanes[l] + lanes[l + 8]) + (lanes[l + 16] + lanes[l + 24]);
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += in[c];
  }
  const float mean = sum / static_cast<float>(cols);
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < cols; ++c) squares += (in[c] - mean) * (in[c] - mean);
  const float rstd = 1.f / __builtin_sqrtf(squares / static_cast<float>(cols) + eps);
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) out[c] = (in[c] - mean) * rstd * gamma[c] + beta[c];
}

void layer_norm_reference(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t cols,
                          float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += in[c];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (in[c] - mean) * (in[c] - mean);
    double rstd = 1.0 / __builtin_sqrt(var / double(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>((in[c] - mean) * rstd * gamma[c] + beta[c]);
  }
}
