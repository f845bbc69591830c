// Written for kiln's CUDA corpus: CUB's block primitives as framework kernels use them (a
// blocked load, a reduction, an exclusive scan and a store), and a warp reduction.
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/warp/warp_reduce.cuh>

constexpr int kThreads = 128, kItems = 4;

extern "C" __global__ void cub_block(const float* x, float* prefix, float* totals, float* warp_max) {
  using Load = cub::BlockLoad<float, kThreads, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Store = cub::BlockStore<float, kThreads, kItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  using Reduce = cub::BlockReduce<float, kThreads>;
  using Scan = cub::BlockScan<float, kThreads>;
  using Warp = cub::WarpReduce<float>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Store::TempStorage store;
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } scratch;
  __shared__ typename Warp::TempStorage warp_scratch[kThreads / 32];
  float items[kItems];
  const int offset = blockIdx.x * kThreads * kItems;
  Load(scratch.load).Load(x + offset, items);
  __syncthreads();
  float total = Reduce(scratch.reduce).Sum(items);
  __syncthreads();
  Scan(scratch.scan).ExclusiveSum(items, items);
  __syncthreads();
  Store(scratch.store).Store(prefix + offset, items);
  float m = Warp(warp_scratch[threadIdx.x / 32]).Reduce(items[0], cuda::maximum<>{});
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
  if (threadIdx.x % 32 == 0) warp_max[blockIdx.x * (kThreads / 32) + threadIdx.x / 32] = m;
}
