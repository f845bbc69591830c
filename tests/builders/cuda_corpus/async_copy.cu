// Written for kiln's CUDA corpus: asynchronous copies into shared memory through the pipeline
// primitives and cooperative groups' memcpy_async, the sm_80 staging loop of attention and
// GEMM-like kernels.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda_pipeline.h>

namespace cg = cooperative_groups;

extern "C" __global__ void async_copy(const float4* x, float* y) {
  __shared__ __align__(16) float4 stage[2][128];
  cg::thread_block block = cg::this_thread_block();
  const float4* tile = x + blockIdx.x * 256;
  __pipeline_memcpy_async(&stage[0][threadIdx.x], tile + threadIdx.x, sizeof(float4));
  __pipeline_commit();
  cg::memcpy_async(block, stage[1], tile + 128, sizeof(float4) * 128);
  __pipeline_wait_prior(0);
  cg::wait(block);
  float4 a = stage[0][threadIdx.x ^ 1], b = stage[1][threadIdx.x];
  y[blockIdx.x * 128 + threadIdx.x] = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
}
