// Included before a CUDA source kiln compiles with hiprtc (which brings HIP's device headers
// itself): only the CUDA spellings HIP lacks. The Clang path uses kiln/hip_prelude.h instead.
#pragma once

// CUDA's *_sync shuffles take a mask; HIP's do not. `width` stays CUDA's 32 so a kernel written
// for 32-lane warps computes the same on a 64-lane wavefront.
template <class T> __device__ inline T __shfl_sync(unsigned, T v, int lane, int width = 32) { return __shfl(v, lane, width); }
template <class T> __device__ inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) { return __shfl_xor(v, mask, width); }
template <class T> __device__ inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) { return __shfl_down(v, d, width); }
template <class T> __device__ inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) { return __shfl_up(v, d, width); }
__device__ inline void __syncwarp(unsigned = 0xffffffffu) { __builtin_amdgcn_wave_barrier(); }
