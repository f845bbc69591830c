// Layer norm forward: a block per row; each warp reduces with cooperative groups (cg::reduce),
// and the warps' partial sums meet in shared memory.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

// The sum of `value` over the whole block, returned to every thread.
__device__ float block_sum(const cg::thread_block& block, const cg::thread_block_tile<32>& warp, float value, float* partial) {
  value = cg::reduce(warp, value, cg::plus<float>());
  if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = value;
  block.sync();
  float total = 0.f;
  for (unsigned w = 0; w < warp.meta_group_size(); ++w) total += partial[w];
  block.sync();  // `partial` is written again by the next reduction
  return total;
}

extern "C" __global__ void layer_norm(const float* __restrict__ x, const float* __restrict__ gamma,
                                      const float* __restrict__ beta, float* __restrict__ y, long long rows, long long cols,
                                      float eps) {
  __shared__ float partial[32];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  long long row = blockIdx.x;
  if (row >= rows) return;  // the whole block leaves together
  const float* in = x + row * cols;
  float* out = y + row * cols;
  float sum = 0.f;
  for (long long c = threadIdx.x; c < cols; c += blockDim.x) sum += in[c];
  const float mean = block_sum(block, warp, sum, partial) / static_cast<float>(cols);
  float squares = 0.f;
  for (long long c = threadIdx.x; c < cols; c += blockDim.x) squares += (in[c] - mean) * (in[c] - mean);
  const float rstd = rsqrtf(block_sum(block, warp, squares, partial) / static_cast<float>(cols) + eps);
  for (long long c = threadIdx.x; c < cols; c += blockDim.x) out[c] = (in[c] - mean) * rstd * gamma[c] + beta[c];
}
