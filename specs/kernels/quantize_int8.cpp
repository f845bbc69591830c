// Symmetric int8 quantisation with a scale per group of `group` consecutive elements, as
// DeepSpeed's and bitsandbytes' blockwise quantizers do: scale = max|x| / 127 and
// q = rint(x * 127 / max|x|); dequantisation is q * scale. A block of 32 G threads handles G
// groups (on CUDA a warp each; here a loop, so that a block is worth scheduling). The
// reference does the same float arithmetic, so the bytes must agree exactly.
#include "kiln_ops/common.h"

void quantize_int8(const kiln::cpu::Block& b, const float* __restrict x, int8_t* __restrict q, float* __restrict scales,
                   int64_t n, int64_t group) {
  const int64_t groups_per_block = b.block_dim.x / 32;
  for (int64_t g = int64_t(b.block_idx.x) * groups_per_block; g < int64_t(b.block_idx.x + 1) * groups_per_block; ++g) {
    int64_t begin = g * group, end = begin + group < n ? begin + group : n;
    if (begin >= n) return;
    float amax = 0.f;
    // fmaxf, not a comparison: it is what Clang recognises as a max reduction to vectorise.
#pragma omp simd reduction(max : amax)
    for (int64_t i = begin; i < end; ++i) amax = __builtin_fmaxf(amax, __builtin_fabsf(x[i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    scales[g] = amax / 127.f;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) q[i] = static_cast<int8_t>(__builtin_rintf(x[i] * inv));
  }
}

void dequantize_int8(const kiln::cpu::Block& b, const int8_t* __restrict q, const float* __restrict scales,
                     float* __restrict y, int64_t n, int64_t group) {
  const int64_t groups_per_block = b.block_dim.x / 32;
  for (int64_t g = int64_t(b.block_idx.x) * groups_per_block; g < int64_t(b.block_idx.x + 1) * groups_per_block; ++g) {
    int64_t begin = g * group, end = begin + group < n ? begin + group : n;
    if (begin >= n) return;
    const float scale = scales[g];
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) y[i] = static_cast<float>(q[i]) * scale;
  }
}

void quantize_int8_reference(const float* x, int8_t* q, float* scales, int64_t n, int64_t group) {
  for (int64_t g = 0; g * group < n; ++g) {
    float amax = 0.f;
    for (int64_t i = g * group; i < n && i < (g + 1) * group; ++i) amax = __builtin_fmaxf(amax, __builtin_fabsf(x[i]));
    float inv = amax > 0.f ? 127.f / amax : 0.f;
    scales[g] = amax / 127.f;
    for (int64_t i = g * group; i < n && i < (g + 1) * group; ++i) q[i] = static_cast<int8_t>(__builtin_rintf(x[i] * inv));
  }
}

void dequantize_int8_reference(const int8_t* q, const float* scales, float* y, int64_t n, int64_t group) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(q[i]) * scales[i / group];
}
