// Written for kiln's CUDA corpus: inline PTX as frameworks write it (lane and SM ids, saturating
// int8 conversion, byte permutes, non-coherent vector loads, shared addresses, asynchronous
// copies on sm_80 and newer), and the toolkit version check they guard such code with.
#include <cstdint>

#if !defined(__CUDACC_VER_MAJOR__) || __CUDACC_VER_MAJOR__ < 11
#error "nvcc and NVRTC define __CUDACC_VER_MAJOR__; kernels written for them test it"
#endif

__device__ __forceinline__ unsigned lane_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ int8_t to_int8(float x) {
  uint32_t r;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(x));
  return (int8_t)r;
}
__device__ __forceinline__ uint32_t permute(uint32_t a, uint32_t b, uint32_t s) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
  return r;
}
__device__ __forceinline__ float4 load_nc(const float4* p) {
  float4 r;
  asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ unsigned shared_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

extern "C" __global__ void inline_ptx(const float4* x, float* y, int8_t* q, uint32_t* w) {
  __shared__ __align__(16) float4 tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(&tile[threadIdx.x])), "l"(x + i));
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
#else
  tile[threadIdx.x] = load_nc(x + i);
#endif
  __syncthreads();
  float4 v = tile[threadIdx.x ^ 1];
  y[i] = v.x + v.y + v.z + v.w;
  q[i] = to_int8(v.x * 127.0f);
  w[i] = permute(lane_id(), sm_id(), 0x3210);
}
