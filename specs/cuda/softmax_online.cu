// Softmax of each row with an online normaliser: each thread keeps a running (max, sum) over
// its strided elements, warps merge theirs with shuffles, and the warps' pairs meet in the
// launch's dynamic shared memory (8 bytes per warp).
struct MaxSum {
  float max, sum;
};

// Two partial (max, sum) pairs as one: each sum rescaled to the larger maximum.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  float m = fmaxf(a.max, b.max);
  return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

extern "C" __global__ void softmax_online(const float* __restrict__ x, float* __restrict__ y, long long rows, long long cols) {
  extern __shared__ MaxSum warp_pairs[];
  long long row = blockIdx.x;
  if (row >= rows) return;
  const float* in = x + row * cols;
  float* out = y + row * cols;
  MaxSum own{-3.402823466e38f, 0.f};
  for (long long c = threadIdx.x; c < cols; c += blockDim.x) own = merge(own, MaxSum{in[c], 1.f});
  for (int offset = 16; offset > 0; offset /= 2)
    own = merge(own, MaxSum{__shfl_xor_sync(0xffffffffu, own.max, offset), __shfl_xor_sync(0xffffffffu, own.sum, offset)});
  if (threadIdx.x % 32 == 0) warp_pairs[threadIdx.x / 32] = own;
  __syncthreads();
  MaxSum row_pair = warp_pairs[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) row_pair = merge(row_pair, warp_pairs[w]);
  const float inv = 1.f / row_pair.sum;
  for (long long c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(in[c] - row_pair.max) * inv;
}
