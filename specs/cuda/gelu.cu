// GELU with the tanh approximation on fp32 or bf16 tensors: 128-bit loads and stores (four
// floats, eight bfloat16s) where x and y line up, two vectors in flight per thread, grid-stride
// (kiln_ops/cuda_common.cuh).
#include <cuda_bf16.h>

#include "kiln_ops/cuda_common.cuh"

namespace {

// torch's formula, operation for operation (its CUDA kernel for approximate="tanh" computes in
// float: x^3 as x*x*x, then sqrt(2/pi) * (x + 0.044715 x^3), then 0.5 x (1 + tanh)), with the
// same accurate tanhf (CUDA's: 2 ulp). Not a faster tanh: torch's own op reaches 99% of the
// device's copy bandwidth with it (docs/GPU-CHECK-wheel-h200.md), so the time is in moving the
// bytes, and this keeps kiln's result equal to torch's up to the compilers' FMA contraction.
__device__ __forceinline__ float gelu_tanh(float x) {
  const float k_beta = 0.7978845608028654f;  // sqrt(2 / pi)
  const float k_kappa = 0.044715f;
  const float cube = x * x * x;
  const float inner = k_beta * (x + k_kappa * cube);
  return 0.5f * x * (1.f + tanhf(inner));
}

template <class T>
struct Gelu;

template <>
struct Gelu<float> {
  static constexpr int k_width = 4;
  const float* x;
  float* y;
  struct Loaded {
    float4 v;
  };
  __device__ Loaded load(long long i) const { return {__ldg(reinterpret_cast<const float4*>(x + i))}; }
  __device__ void store(long long i, const Loaded& in) const {
    float4 r;
    r.x = gelu_tanh(in.v.x);
    r.y = gelu_tanh(in.v.y);
    r.z = gelu_tanh(in.v.z);
    r.w = gelu_tanh(in.v.w);
    *reinterpret_cast<float4*>(y + i) = r;
  }
  __device__ void one(long long i) const { y[i] = gelu_tanh(__ldg(x + i)); }
};

// bf16: computed in float (as torch does), rounded to nearest even once.
__device__ __forceinline__ unsigned int gelu_pair(unsigned int pair) {
  const unsigned int lo = __bfloat16_as_ushort(__float2bfloat16(gelu_tanh(kiln_ops::bf16_low(pair))));
  const unsigned int hi = __bfloat16_as_ushort(__float2bfloat16(gelu_tanh(kiln_ops::bf16_high(pair))));
  return lo | (hi << 16);
}

template <>
struct Gelu<__nv_bfloat16> {
  static constexpr int k_width = 8;
  const __nv_bfloat16* x;
  __nv_bfloat16* y;
  struct Loaded {
    uint4 v;
  };
  __device__ Loaded load(long long i) const { return {__ldg(reinterpret_cast<const uint4*>(x + i))}; }
  __device__ void store(long long i, const Loaded& in) const {
    uint4 r;
    r.x = gelu_pair(in.v.x);
    r.y = gelu_pair(in.v.y);
    r.z = gelu_pair(in.v.z);
    r.w = gelu_pair(in.v.w);
    *reinterpret_cast<uint4*>(y + i) = r;
  }
  __device__ void one(long long i) const { y[i] = __float2bfloat16(gelu_tanh(__bfloat162float(x[i]))); }
};

}  // namespace

template <class T>
__global__ void __launch_bounds__(1024) gelu(const T* __restrict__ x, T* __restrict__ y, long long n) {
  constexpr int V = Gelu<T>::k_width;
  const int phase = kiln_ops::vector_phase<V>(x);
  const bool same = kiln_ops::vector_phase<V>(y) == phase;
  kiln_ops::for_each_element<V, 2>(n, kiln_ops::split<V>(n, phase, same), Gelu<T>{x, y});
}
