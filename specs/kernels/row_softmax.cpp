#include "kiln_ops/common.h"

// y[r, :] = softmax(x[r, :]) for a row-major rows x cols matrix; one block per row.
// Max-subtracted for stability; __builtin_expf avoids parsing <cmath>.
void row_softmax(const kiln::cpu::Block& blk, const float* __restrict x, float* __restrict y, int64_t rows,
                 int64_t cols) {
  int64_t r = blk.block_idx.x;
  if (r >= rows) return;
  const float* in = x + r * cols;
  float* out = y + r * cols;
  float m = in[0];
  for (int64_t c = 1; c < cols; ++c) m = in[c] > m ? in[c] : m;
  float sum = 0.f;
  for (int64_t c = 0; c < cols; ++c) {
    out[c] = __builtin_expf(in[c] - m);
    sum += out[c];
  }
  float inv = 1.f / sum;
  for (int64_t c = 0; c < cols; ++c) out[c] *= inv;
}

// In double precision, one row at a time.
void row_softmax_reference(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double m = x[r * cols];
    for (int64_t c = 1; c < cols; ++c) m = x[r * cols + c] > m ? x[r * cols + c] : m;
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += __builtin_exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(__builtin_exp(x[r * cols + c] - m) / sum);
  }
}
