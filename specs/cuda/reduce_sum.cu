// The sum of each chunk of elements with CUB: the block's threads stride over the chunk, four
// floats a load where the chunk starts at a 16-byte boundary (four vectors in flight per thread),
// then cub::BlockReduce combines their sums. Blocks stride over the chunks by the grid, so any
// grid covers them (the spec launches a block per chunk). The block must have 256 threads
// (cub::BlockReduce<float, 256>).
#include <cub/block/block_reduce.cuh>

#include "kiln_ops/cuda_common.cuh"

namespace {
constexpr int k_threads = 256;
constexpr int k_unroll = 4;
}  // namespace

extern "C" __global__ void __launch_bounds__(k_threads) reduce_sum(const float* __restrict__ x, float* __restrict__ partial, long long n, long long chunk) {
  using BlockReduce = cub::BlockReduce<float, k_threads>;
  __shared__ typename BlockReduce::TempStorage scratch;
  const bool vec = chunk % 4 == 0 && kiln_ops::vector_phase<4>(x) == 0;
  const long long t = threadIdx.x;
  for (long long c = blockIdx.x; c * chunk < n; c += gridDim.x) {
    const long long begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
    const long long vectors = vec ? (end - begin) / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x + begin);
    float sum = 0.f;
    long long j = t;
    for (; j + (k_unroll - 1) * k_threads < vectors; j += k_unroll * k_threads) {
      float4 v[k_unroll];
#pragma unroll
      for (int u = 0; u < k_unroll; ++u) v[u] = kiln_ops::ldg(x4 + j + u * k_threads);
#pragma unroll
      for (int u = 0; u < k_unroll; ++u) sum += (v[u].x + v[u].y) + (v[u].z + v[u].w);
    }
    for (; j < vectors; j += k_threads) {
      const float4 v = kiln_ops::ldg(x4 + j);
      sum += (v.x + v.y) + (v.z + v.w);
    }
    for (long long i = begin + vectors * 4 + t; i < end; i += k_threads) sum += kiln_ops::ldg(x + i);
    const float total = BlockReduce(scratch).Sum(sum);
    if (threadIdx.x == 0) partial[c] = total;
    __syncthreads();  // `scratch` is used again by the next chunk's reduction
  }
}
