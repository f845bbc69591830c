// <cuda_bf16.h> for CUDA sources compiled for AMD GPUs (kiln/hip_prelude.h): bfloat16 as CUDA
// kernels spell it, stored as its 16 bits, converted with round-to-nearest-even as CUDA does.
#pragma once

struct __nv_bfloat16 {
  unsigned short bits;
};

__device__ __host__ inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned int u = static_cast<unsigned int>(h.bits) << 16;
  return __builtin_bit_cast(float, u);
}

__device__ __host__ inline __nv_bfloat16 __float2bfloat16(float f) {
  unsigned int u = __builtin_bit_cast(unsigned int, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<unsigned short>((u >> 16) | 0x40)};  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<unsigned short>(u >> 16)};
}

// The 16 bits of a bfloat16, and back.
__device__ __host__ inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
__device__ __host__ inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return {bits}; }
