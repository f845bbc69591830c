// out[0] += sum(x): every thread sums its grid-stride share in double (four floats a load where
// x starts at a 16-byte boundary, two vectors in flight), warps combine with shuffles and the
// block's warps in shared memory, and each block adds its sum atomically (double atomicAdd needs
// sm_60). The spec's [cuda] grid is a few waves of blocks, so a large x takes a few thousand
// atomic adds on one address, not one per 256 elements.
#include "kiln_ops/cuda_common.cuh"

namespace {
struct Sum {
  const float* x;
  double* total;  // this thread's running sum
  struct Loaded {
    float4 v;
  };
  __device__ Loaded load(long long i) const { return {kiln_ops::ldg(reinterpret_cast<const float4*>(x + i))}; }
  __device__ void store(long long, const Loaded& in) const {
    *total += (static_cast<double>(in.v.x) + static_cast<double>(in.v.y)) + (static_cast<double>(in.v.z) + static_cast<double>(in.v.w));
  }
  __device__ void one(long long i) const { *total += static_cast<double>(kiln_ops::ldg(x + i)); }
};
}  // namespace

extern "C" __global__ void __launch_bounds__(1024) sum_reduce(const float* __restrict__ x, double* out, long long n) {
  __shared__ double scratch[32];
  double total = 0.0;
  const int phase = kiln_ops::vector_phase<4>(x);
  kiln_ops::for_each_element<4, 2>(n, kiln_ops::split<4>(n, phase, true), Sum{x, &total});
  total = kiln_ops::warp_combine(total, kiln_ops::Plus());
  const int warps = static_cast<int>((blockDim.x + 31) / 32);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double block_total = scratch[0];
    for (int w = 1; w < warps; ++w) block_total += scratch[w];
    atomicAdd(out, block_total);
  }
}
