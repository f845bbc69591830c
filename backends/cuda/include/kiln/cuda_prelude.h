// What kernels compiled by kiln's Clang CUDA path see instead of the CUDA headers, whose
// parsing costs 0.5-0.7 s per compile (TOOLCHAIN-FACTS.md): the attributes, the built-in
// variables, and the device functions the bundled kernels use, mapped onto libdevice (which
// clang links from --cuda-path) or NVVM built-ins. NVRTC needs none of this.
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))

#include <__clang_cuda_builtin_vars.h>

extern "C" __device__ float __nv_expf(float);
extern "C" __device__ double __nv_exp(double);
extern "C" __device__ float __nv_fmaxf(float, float);
extern "C" __device__ float __nv_fminf(float, float);

__device__ inline float expf(float x) { return __nv_expf(x); }
__device__ inline double exp(double x) { return __nv_exp(x); }
__device__ inline float fmaxf(float a, float b) { return __nv_fmaxf(a, b); }
__device__ inline float fminf(float a, float b) { return __nv_fminf(a, b); }
__device__ inline double atomicAdd(double* p, double v) { return __nvvm_atom_add_gen_d(p, v); }
__device__ inline float atomicAdd(float* p, float v) { return __nvvm_atom_add_gen_f(p, v); }
// __syncthreads is a clang built-in for NVPTX already.
