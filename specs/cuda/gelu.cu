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

// One 32-bit lane of a 128-bit vector: a float, or a bfloat16 pair (element 0 in the low half),
// computed in float (as torch does) and rounded to nearest even once.
__device__ __forceinline__ float gelu_lane(float x) { return gelu_tanh(x); }
__device__ __forceinline__ unsigned int gelu_lane(unsigned int pair) {
  const unsigned int lo = __bfloat16_as_ushort(__float2bfloat16(gelu_tanh(kiln_ops::bf16_low(pair))));
  const unsigned int hi = __bfloat16_as_ushort(__float2bfloat16(gelu_tanh(kiln_ops::bf16_high(pair))));
  return lo | (hi << 16);
}
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store_float(float* y, float v) { *y = v; }
__device__ __forceinline__ void store_float(__nv_bfloat16* y, float v) { *y = __float2bfloat16(v); }

// 16 bytes a vector: four floats (float4) or eight bfloat16s (uint4).
template <class T> struct Vector16 { using type = uint4; };
template <> struct Vector16<float> { using type = float4; };

template <class T>
struct Gelu {
  static constexpr int k_width = 16 / sizeof(T);
  using Vec = typename Vector16<T>::type;
  const T* x;
  T* y;
  struct Loaded {
    Vec v;
  };
  __device__ Loaded load(long long i) const { return {kiln_ops::ldg(reinterpret_cast<const Vec*>(x + i))}; }
  __device__ void store(long long i, const Loaded& in) const {
    Vec r;
    r.x = gelu_lane(in.v.x);
    r.y = gelu_lane(in.v.y);
    r.z = gelu_lane(in.v.z);
    r.w = gelu_lane(in.v.w);
    *reinterpret_cast<Vec*>(y + i) = r;
  }
  __device__ void one(long long i) const { store_float(y + i, gelu_tanh(to_float(kiln_ops::ldg(x + i)))); }
};

}  // namespace

template <class T>
__global__ void __launch_bounds__(1024) gelu(const T* __restrict__ x, T* __restrict__ y, long long n) {
  constexpr int V = Gelu<T>::k_width;
  const int phase = kiln_ops::vector_phase<V>(x);
  const bool same = kiln_ops::vector_phase<V>(y) == phase;
  kiln_ops::for_each_element<V, 2>(n, kiln_ops::split<V>(n, phase, same), Gelu<T>{x, y});
}
