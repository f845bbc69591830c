// What kernels compiled by kiln's Clang CUDA path see instead of the CUDA headers, whose
// parsing costs 0.5-0.7 s per compile (TOOLCHAIN-FACTS.md): the attributes, the built-in
// variables, and the device functions kernels use most, mapped onto libdevice (which clang
// links from --cuda-path) or NVVM built-ins. A kernel that needs more than this compiles
// against the toolkit's headers instead (jit/clang). NVRTC needs none of this.
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))

#include <__clang_cuda_builtin_vars.h>

// libdevice's math, as the CUDA headers name it.
#define KILN_LIBDEVICE_1(name, type) \
  extern "C" __device__ type __nv_##name(type); \
  __device__ inline type name(type x) { return __nv_##name(x); }
#define KILN_LIBDEVICE_2(name, type) \
  extern "C" __device__ type __nv_##name(type, type); \
  __device__ inline type name(type x, type y) { return __nv_##name(x, y); }
KILN_LIBDEVICE_1(expf, float)
KILN_LIBDEVICE_1(exp, double)
KILN_LIBDEVICE_1(exp2f, float)
KILN_LIBDEVICE_1(logf, float)
KILN_LIBDEVICE_1(log, double)
KILN_LIBDEVICE_1(log2f, float)
KILN_LIBDEVICE_1(sqrtf, float)
KILN_LIBDEVICE_1(sqrt, double)
KILN_LIBDEVICE_1(rsqrtf, float)
KILN_LIBDEVICE_1(tanhf, float)
KILN_LIBDEVICE_1(erff, float)
KILN_LIBDEVICE_1(fabsf, float)
KILN_LIBDEVICE_1(fabs, double)
KILN_LIBDEVICE_1(rintf, float)
KILN_LIBDEVICE_1(roundf, float)
KILN_LIBDEVICE_1(floorf, float)
KILN_LIBDEVICE_1(ceilf, float)
KILN_LIBDEVICE_2(powf, float)
KILN_LIBDEVICE_2(fmaxf, float)
KILN_LIBDEVICE_2(fminf, float)
#undef KILN_LIBDEVICE_1
#undef KILN_LIBDEVICE_2

// The fast, less accurate intrinsics (what --use_fast_math substitutes).
extern "C" __device__ float __nv_fast_expf(float);
extern "C" __device__ float __nv_fast_logf(float);
extern "C" __device__ float __nv_fast_fdividef(float, float);
__device__ inline float __expf(float x) { return __nv_fast_expf(x); }
__device__ inline float __logf(float x) { return __nv_fast_logf(x); }
__device__ inline float __fdividef(float x, float y) { return __nv_fast_fdividef(x, y); }

__device__ inline double atomicAdd(double* p, double v) { return __nvvm_atom_add_gen_d(p, v); }
__device__ inline float atomicAdd(float* p, float v) { return __nvvm_atom_add_gen_f(p, v); }
__device__ inline int atomicAdd(int* p, int v) { return __nvvm_atom_add_gen_i(p, v); }

// Warp shuffles and synchronisation. The last operand of the NVVM built-ins packs the segment
// width: ((32 - width) << 8) | 31 for idx, down and xor; (32 - width) << 8 for up.
__device__ inline void __syncwarp(unsigned mask = 0xffffffffu) { __nvvm_bar_warp_sync(mask); }
#define KILN_SHUFFLE(type, suffix)                                                                         \
  __device__ inline type __shfl_sync(unsigned mask, type v, int lane, int width = 32) {                   \
    return __nvvm_shfl_sync_idx_##suffix(mask, v, lane, ((32 - width) << 8) | 31);                        \
  }                                                                                                        \
  __device__ inline type __shfl_xor_sync(unsigned mask, type v, int lane_mask, int width = 32) {          \
    return __nvvm_shfl_sync_bfly_##suffix(mask, v, lane_mask, ((32 - width) << 8) | 31);                  \
  }                                                                                                        \
  __device__ inline type __shfl_down_sync(unsigned mask, type v, unsigned delta, int width = 32) {        \
    return __nvvm_shfl_sync_down_##suffix(mask, v, delta, ((32 - width) << 8) | 31);                      \
  }                                                                                                        \
  __device__ inline type __shfl_up_sync(unsigned mask, type v, unsigned delta, int width = 32) {          \
    return __nvvm_shfl_sync_up_##suffix(mask, v, delta, (32 - width) << 8);                               \
  }
KILN_SHUFFLE(float, f32)
KILN_SHUFFLE(int, i32)
#undef KILN_SHUFFLE
// __syncthreads is a clang built-in for NVPTX already.
