// Helpers shared by the bundled OpenCL kernels (OpenCL C 3.0; no extension beyond 64-bit
// atomics, which every device with fine-grained SVM has).
#ifndef KILN_OPS_OPENCL_COMMON_H
#define KILN_OPS_OPENCL_COMMON_H

// bfloat16 as its 16 bits (OpenCL C has no bfloat16 type): widened exactly, narrowed with
// round-to-nearest-even as CUDA's __float2bfloat16 and the CPU's __bf16 do.
inline float bf16_to_float(ushort b) { return as_float((uint)b << 16); }
inline ushort float_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}

// The sum of `value` over the work-group, returned to every work-item. `scratch` holds one
// float per work-item; the work-group size must be a power of two.
inline float group_sum(float value, __local float* scratch) {
  uint t = get_local_id(0), n = get_local_size(0);
  scratch[t] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = n / 2; s > 0; s /= 2) {
    if (t < s) scratch[t] += scratch[t + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // `scratch` is written again by the next reduction
  return total;
}

#endif
