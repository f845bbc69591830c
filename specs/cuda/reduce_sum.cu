// The sum of each chunk of elements with CUB: 256 threads stride over the chunk, then
// cub::BlockReduce combines their sums.
#include <cub/block/block_reduce.cuh>

extern "C" __global__ void reduce_sum(const float* __restrict__ x, float* __restrict__ partial, long long n, long long chunk) {
  using BlockReduce = cub::BlockReduce<float, 256>;
  __shared__ typename BlockReduce::TempStorage scratch;
  long long begin = static_cast<long long>(blockIdx.x) * chunk, end = begin + chunk < n ? begin + chunk : n;
  float sum = 0.f;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) sum += x[i];
  float total = BlockReduce(scratch).Sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}
