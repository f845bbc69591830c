// <cooperative_groups/reduce.h> for CUDA sources compiled for AMD GPUs: cg::reduce over a tile
// with CUDA's operators. Every thread of the tile gets the result, as in CUDA.
#pragma once

#include <cooperative_groups.h>

namespace cooperative_groups {

template <class T> struct plus {
  __device__ T operator()(const T& a, const T& b) const { return a + b; }
};
template <class T> struct greater {
  __device__ T operator()(const T& a, const T& b) const { return a > b ? a : b; }
};
template <class T> struct less {
  __device__ T operator()(const T& a, const T& b) const { return a < b ? a : b; }
};

template <unsigned N, class T, class Op>
__device__ T reduce(const thread_block_tile<N>& tile, T value, Op op) {
  for (unsigned offset = N / 2; offset > 0; offset /= 2) value = op(value, tile.shfl_xor(value, offset));
  return value;
}

}  // namespace cooperative_groups
