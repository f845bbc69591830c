// <cooperative_groups.h> for CUDA sources compiled for AMD GPUs (kiln/hip_prelude.h): the part
// of CUDA's cooperative groups that kernels commonly use, with CUDA's meaning. A tile is at most
// 32 threads, as a CUDA warp, also on a 64-lane wavefront (shuffles stay inside 32 lanes). What
// is not here is a compile error naming it.
#pragma once

namespace cooperative_groups {

class thread_block {
 public:
  __device__ void sync() const { __syncthreads(); }
  __device__ unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  __device__ unsigned thread_rank() const { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
  __device__ unsigned num_threads() const { return size(); }
};

__device__ inline thread_block this_thread_block() { return {}; }

template <unsigned N>
class thread_block_tile {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16 || N == 32, "kiln's tiles have 1 to 32 threads, as CUDA's warps");

 public:
  __device__ unsigned size() const { return N; }
  __device__ unsigned num_threads() const { return N; }
  __device__ unsigned thread_rank() const { return this_thread_block().thread_rank() % N; }
  __device__ unsigned meta_group_rank() const { return this_thread_block().thread_rank() / N; }
  __device__ unsigned meta_group_size() const { return (this_thread_block().size() + N - 1) / N; }
  __device__ void sync() const { __syncwarp(); }
  template <class T> __device__ T shfl(T v, int lane) const { return __shfl_sync(0xffffffffu, v, lane, N); }
  template <class T> __device__ T shfl_xor(T v, int mask) const { return __shfl_xor_sync(0xffffffffu, v, mask, N); }
  template <class T> __device__ T shfl_down(T v, unsigned delta) const { return __shfl_down_sync(0xffffffffu, v, delta, N); }
  template <class T> __device__ T shfl_up(T v, unsigned delta) const { return __shfl_up_sync(0xffffffffu, v, delta, N); }
};

template <unsigned N>
__device__ thread_block_tile<N> tiled_partition(const thread_block&) {
  return {};
}

}  // namespace cooperative_groups
