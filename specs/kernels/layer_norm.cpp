// Layer norm forward over the last dimension, as torch.nn.functional.layer_norm: each row is
// shifted by its mean, scaled by 1/sqrt(variance + eps), then by gamma, plus beta. One block
// per row; the mean and the variance are two passes over it (as PyTorch's CPU kernel does).
#include "kiln_ops/common.h"

void layer_norm(const kiln::cpu::Block& b, const float* __restrict x, const float* __restrict gamma,
                const float* __restrict beta, float* __restrict y, int64_t rows, int64_t cols, float eps) {
  int64_t row = b.block_idx.x;
  if (row >= rows) return;
  const float* in = x + row * cols;
  float* out = y + row * cols;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < cols; ++c) sum += in[c];
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
