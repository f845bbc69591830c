#include "kiln_ops/cuda_common.cuh"

// out = a + b: four floats a load and a store where the three tensors line up, two vectors in
// flight per thread, grid-stride (kiln_ops/cuda_common.cuh). Exact: the same sums as any order.
namespace {
struct Add {
  const float* a;
  const float* b;
  float* out;
  struct Loaded {
    float4 a, b;
  };
  __device__ Loaded load(long long i) const {
    return {kiln_ops::ldg(reinterpret_cast<const float4*>(a + i)), kiln_ops::ldg(reinterpret_cast<const float4*>(b + i))};
  }
  __device__ void store(long long i, const Loaded& v) const {
    float4 r;
    r.x = v.a.x + v.b.x;
    r.y = v.a.y + v.b.y;
    r.z = v.a.z + v.b.z;
    r.w = v.a.w + v.b.w;
    *reinterpret_cast<float4*>(out + i) = r;
  }
  __device__ void one(long long i) const { out[i] = kiln_ops::ldg(a + i) + kiln_ops::ldg(b + i); }
};
}  // namespace

extern "C" __global__ void __launch_bounds__(1024) vector_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                                      long long n) {
  const int phase = kiln_ops::vector_phase<4>(a);
  const bool same = kiln_ops::vector_phase<4>(b) == phase && kiln_ops::vector_phase<4>(out) == phase;
  kiln_ops::for_each_element<4, 2>(n, kiln_ops::split<4>(n, phase, same), Add{a, b, out});
}
