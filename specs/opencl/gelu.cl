// GELU with the tanh approximation on fp32 (gelu) or bf16 (gelu_bf16) tensors, a work-item per
// element. One body, two kernels, as the CUDA version's template.
#include "kiln_ops/opencl_common.h"

inline float gelu_of(float v) { return 0.5f * v * (1.f + tanh(0.7978845608028654f * (v + 0.044715f * v * v * v))); }

__kernel void gelu(__global const float* restrict x, __global float* restrict y, long n) {
  long i = get_global_id(0);
  if (i < n) y[i] = gelu_of(x[i]);
}

__kernel void gelu_bf16(__global const ushort* restrict x, __global ushort* restrict y, long n) {
  long i = get_global_id(0);
  if (i < n) y[i] = float_to_bf16(gelu_of(bf16_to_float(x[i])));
}
