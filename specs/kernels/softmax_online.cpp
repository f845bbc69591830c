// Softmax of each row with an online normaliser (Milakov and Gimelshein, 2018): one pass finds
// the maximum and the sum of exponentials together, rescaling the sum whenever the maximum
// grows; a second pass writes the result. Sixteen running (max, sum) pairs let Clang
// vectorise the first pass; they are merged at the end of the row.
#include "kiln_ops/common.h"
#include "kiln_ops/vector_math.h"

void softmax_online(const kiln::cpu::Block& b, const float* __restrict x, float* __restrict y, int64_t rows, int64_t cols) {
  int64_t row = b.block_idx.x;
  if (row >= rows) return;
  const float* in = x + row * cols;
  float* out = y + row * cols;
  constexpr int k_lanes = 16;
  float max[k_lanes], sum[k_lanes];
  for (int l = 0; l < k_lanes; ++l) {
    max[l] = -3.402823466e38f;
    sum[l] = 0.f;
  }
  int64_t c = 0;
  for (; c + k_lanes <= cols; c += k_lanes)
    for (int l = 0; l < k_lanes; ++l) {
      float v = in[c + l], m = v > max[l] ? v : max[l];
      sum[l] = sum[l] * kiln_ops::exp_approx(max[l] - m) + kiln_ops::exp_approx(v - m);
      max[l] = m;
    }
  for (int l = 0; c < cols; ++c, ++l) {  // the row's tail
    float v = in[c], m = v > max[l] ? v : max[l];
    sum[l] = sum[l] * kiln_ops::exp_approx(max[l] - m) + kiln_ops::exp_approx(v - m);
    max[l] = m;
  }
  float row_max = max[0];
  for (int l = 1; l < k_lanes; ++l) row_max = max[l] > row_max ? max[l] : row_max;
  float row_sum = 0.f;
  for (int l = 0; l < k_lanes; ++l) row_sum += sum[l] * kiln_ops::exp_approx(max[l] - row_max);
  const float inv = 1.f / row_sum;
  for (c = 0; c < cols; ++c) out[c] = kiln_ops::exp_approx(in[c] - row_max) * inv;
}

void softmax_online_reference(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double m = x[r * cols];
    for (int64_t c = 1; c < cols; ++c) m = x[r * cols + c] > m ? x[r * cols + c] : m;
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += __builtin_exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(__builtin_exp(x[r * cols + c] - m) / sum);
  }
}
