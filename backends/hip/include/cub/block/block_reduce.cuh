// <cub/block/block_reduce.cuh> for CUDA sources compiled for AMD GPUs: cub::BlockReduce's
// Sum and Reduce for a 1-D block, by 32-lane shuffles and one partial per 32 threads in the
// caller's TempStorage. As in CUB, the result is valid in thread 0. What is not here (other
// algorithms, 2-D blocks) is a compile error naming it.
#pragma once

namespace cub {

struct Sum {
  template <class T> __device__ T operator()(const T& a, const T& b) const { return a + b; }
};
struct Max {
  template <class T> __device__ T operator()(const T& a, const T& b) const { return a > b ? a : b; }
};
struct Min {
  template <class T> __device__ T operator()(const T& a, const T& b) const { return a < b ? a : b; }
};

template <class T, int BLOCK_DIM_X>
class BlockReduce {
  static constexpr int k_warps = (BLOCK_DIM_X + 31) / 32;

 public:
  struct TempStorage {
    T partial[k_warps];
  };

  __device__ explicit BlockReduce(TempStorage& storage) : m_storage(storage) {}

  template <class Op>
  __device__ T Reduce(T value, Op op) {
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) {
      T other = __shfl_down_sync(0xffffffffu, value, offset);
      if (static_cast<int>(threadIdx.x) + offset < BLOCK_DIM_X && lane + offset < 32) value = op(value, other);
    }
    if (lane == 0) m_storage.partial[warp] = value;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 1; w < k_warps; ++w) value = op(value, m_storage.partial[w]);
    return value;
  }

  __device__ T Sum(T value) { return Reduce(value, cub::Sum()); }

 private:
  TempStorage& m_storage;
};

}  // namespace cub
