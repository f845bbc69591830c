// Included before every CUDA source kiln compiles for AMD GPUs (Clang, -x hip, -nogpuinc
// -nogpulib): the CUDA spellings kernels use, defined on Clang's AMDGPU builtins and LLVM's
// own math intrinsics. It needs no ROCm install (no HIP headers, no device-library bitcode), so
// gfx90a, gfx942 and gfx1100 all build on a machine with LLVM alone, and one kernel source
// serves both vendors: an op needs no second copy that differs only in its runtime's names.
// What a kernel uses that is not here is a compile error naming it; it belongs here.
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((amdgpu_flat_work_group_size(1, 1024)))

// threadIdx.x and friends, read from the work-item registers and the dispatch packet.
#define KILN_HIP_DIM(name, read_x, read_y, read_z)                                   \
  struct kiln_hip_##name##_t {                                        \
    __device__ unsigned int get_x() const { return read_x; }               \
    __device__ unsigned int get_y() const { return read_y; }               \
    __device__ unsigned int get_z() const { return read_z; }               \
    __declspec(property(get = get_x)) unsigned int x;                 \
    __declspec(property(get = get_y)) unsigned int y;                 \
    __declspec(property(get = get_z)) unsigned int z;                 \
  };
KILN_HIP_DIM(thread, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(), __builtin_amdgcn_workitem_id_z())
KILN_HIP_DIM(block, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(), __builtin_amdgcn_workgroup_id_z())
KILN_HIP_DIM(block_dim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(), __builtin_amdgcn_workgroup_size_z())
KILN_HIP_DIM(grid_dim, __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(),
             __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(),
             __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z())
#undef KILN_HIP_DIM
extern const __device__ __attribute__((weak)) kiln_hip_thread_t threadIdx;
extern const __device__ __attribute__((weak)) kiln_hip_block_t blockIdx;
extern const __device__ __attribute__((weak)) kiln_hip_block_dim_t blockDim;
extern const __device__ __attribute__((weak)) kiln_hip_grid_dim_t gridDim;
#define warpSize __builtin_amdgcn_wavefrontsize()

__device__ inline void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ inline void __syncwarp(unsigned = 0xffffffffu) { __builtin_amdgcn_wave_barrier(); }

// CUDA's vector types that kernels load and store 128 bits at a time (float4, uint4) or 64
// (uint2, float2), aligned to their size as in CUDA, so a load of one is one global_load_dwordx4.
struct __attribute__((aligned(8))) float2 {
  float x, y;
};
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
  unsigned int x, y;
};
struct __attribute__((aligned(16))) uint4 {
  unsigned int x, y, z, w;
};
// The read-only data path: AMD GPUs have none of their own, a plain load.
template <class T>
__device__ inline T __ldg(const T* p) {
  return *p;
}
__device__ inline float __uint_as_float(unsigned int u) { return __builtin_bit_cast(float, u); }
__device__ inline unsigned int __float_as_uint(float f) { return __builtin_bit_cast(unsigned int, f); }

// Math: LLVM's intrinsics, which the AMDGPU back end lowers itself.
__device__ inline float expf(float x) { return __builtin_expf(x); }
__device__ inline float __expf(float x) { return __builtin_expf(x); }
__device__ inline float logf(float x) { return __builtin_logf(x); }
__device__ inline float __logf(float x) { return __builtin_logf(x); }
__device__ inline float sqrtf(float x) { return __builtin_sqrtf(x); }
__device__ inline float rsqrtf(float x) { return 1.0f / __builtin_sqrtf(x); }
__device__ inline float fabsf(float x) { return __builtin_fabsf(x); }
__device__ inline float fmaxf(float x, float y) { return __builtin_fmaxf(x, y); }
__device__ inline float fminf(float x, float y) { return __builtin_fminf(x, y); }
__device__ inline float fmaf(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
__device__ inline float rintf(float x) { return __builtin_rintf(x); }
__device__ inline float roundf(float x) { return __builtin_roundf(x); }
__device__ inline float floorf(float x) { return __builtin_floorf(x); }
__device__ inline float ceilf(float x) { return __builtin_ceilf(x); }
__device__ inline float powf(float x, float y) {
  // exp2(y * log2(x)) for x > 0, as a fast-math pow; x <= 0 follows C for integral y.
  if (x > 0.0f) return __builtin_exp2f(y * __builtin_log2f(x));
  if (x == 0.0f) return y > 0.0f ? 0.0f : (y == 0.0f ? 1.0f : __builtin_inff());
  float r = __builtin_exp2f(y * __builtin_log2f(-x));
  return (static_cast<long long>(y) & 1) ? -r : r;
}
__device__ inline float tanhf(float x) {
  float e = __builtin_expf(-2.0f * __builtin_fabsf(x));
  return __builtin_copysignf((1.0f - e) / (1.0f + e), x);
}
__device__ inline float __fdividef(float x, float y) { return x / y; }
__device__ inline float __fdiv_rn(float x, float y) { return x / y; }
__device__ inline float __fmul_rn(float x, float y) {
  // Keeps the product from being fused into an FMA, as CUDA's __fmul_rn does.
  float p = x * y;
  __asm__ volatile("" : "+v"(p));
  return p;
}

// Warp shuffles through ds_bpermute (byte addresses of the source lane). `width` stays CUDA's
// 32, so a kernel written for 32-lane warps computes the same on a 64-lane wavefront: each half
// reduces on its own, as two CUDA warps would.
__device__ inline int kiln_hip_lane() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
__device__ inline int kiln_hip_bpermute(int src_lane, int v) { return __builtin_amdgcn_ds_bpermute(src_lane << 2, v); }
template <class T>
__device__ inline T kiln_hip_move(T v, int src) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "shuffles move 32- or 64-bit values");
  if constexpr (sizeof(T) == 4) {
    return __builtin_bit_cast(T, kiln_hip_bpermute(src, __builtin_bit_cast(int, v)));
  } else {
    long long b = __builtin_bit_cast(long long, v);
    int lo = kiln_hip_bpermute(src, static_cast<int>(b)), hi = kiln_hip_bpermute(src, static_cast<int>(b >> 32));
    return __builtin_bit_cast(T, (static_cast<long long>(hi) << 32) | static_cast<unsigned int>(lo));
  }
}
#define KILN_HIP_SHUFFLE(type)                                                                               \
  __device__ inline type __shfl_sync(unsigned, type v, int lane, int width = 32) {                          \
    int self = kiln_hip_lane();                                                                              \
    return kiln_hip_move(v, (self & ~(width - 1)) + (lane & (width - 1)));                                   \
  }                                                                                                          \
  __device__ inline type __shfl_xor_sync(unsigned, type v, int lane_mask, int width = 32) {                  \
    int self = kiln_hip_lane(), src = self ^ lane_mask;                                                      \
    return kiln_hip_move(v, (src & ~(width - 1)) == (self & ~(width - 1)) ? src : self);                     \
  }                                                                                                          \
  __device__ inline type __shfl_down_sync(unsigned, type v, unsigned delta, int width = 32) {                \
    int self = kiln_hip_lane(), src = self + static_cast<int>(delta);                                        \
    return kiln_hip_move(v, (src & ~(width - 1)) == (self & ~(width - 1)) ? src : self);                     \
  }                                                                                                          \
  __device__ inline type __shfl_up_sync(unsigned, type v, unsigned delta, int width = 32) {                  \
    int self = kiln_hip_lane(), src = self - static_cast<int>(delta);                                        \
    return kiln_hip_move(v, src >= (self & ~(width - 1)) ? src : self);                                      \
  }
KILN_HIP_SHUFFLE(int)
KILN_HIP_SHUFFLE(unsigned)
KILN_HIP_SHUFFLE(float)
KILN_HIP_SHUFFLE(double)
KILN_HIP_SHUFFLE(long long)
#undef KILN_HIP_SHUFFLE

// Device-scope relaxed atomics, as CUDA's atomicAdd.
__device__ inline float atomicAdd(float* p, float v) { return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
__device__ inline double atomicAdd(double* p, double v) { return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
__device__ inline int atomicAdd(int* p, int v) { return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
__device__ inline unsigned atomicAdd(unsigned* p, unsigned v) { return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
__device__ inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
