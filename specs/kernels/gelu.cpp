// GELU with the tanh approximation (torch.nn.functional.gelu(approximate="tanh")), on fp32 or
// bf16 tensors; bf16 computes through float, as PyTorch does. 0.5 x (1 + tanh(u)) is computed
// as x / (1 + e^(-2u)), the same function with one exponential and one division, and the loop
// vectorises: the exponential comes from kiln_ops/vector_math.h, not libm.
#include "kiln_ops/common.h"
#include "kiln_ops/vector_math.h"

template <class T>
void gelu(const kiln::cpu::Block& b, const T* __restrict x, T* __restrict y, int64_t n) {
  kiln_ops::Range r = kiln_ops::block_range(b, n);
#pragma omp simd
  for (int64_t i = r.begin; i < r.end; ++i) {
    float v = kiln_ops::to_float(x[i]);
    // -2u = -2 sqrt(2 / pi) (x + 0.044715 x^3), its constants folded: 3 operations, not 5.
    float minus_2u = v * (-1.5957691216057308f + -0.07135481627260025f * (v * v));
    y[i] = kiln_ops::from_float(v / (1.f + kiln_ops::exp_approx(minus_2u)), y);
  }
}

// In double precision with libm's tanh, rounded to the element type once.
template <class T>
static void gelu_reference_of(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v = static_cast<double>(static_cast<float>(x[i]));
    y[i] = static_cast<T>(static_cast<float>(0.5 * v * (1.0 + __builtin_tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))));
  }
}

void gelu_reference(const float* x, float* y, int64_t n) { gelu_reference_of(x, y, n); }
void gelu_bf16_reference(const __bf16* x, __bf16* y, int64_t n) { gelu_reference_of(x, y, n); }
