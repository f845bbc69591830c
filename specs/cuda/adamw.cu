// One AdamW step over fp32 parameters with fp32 or bf16 gradients: 128-bit loads and stores of
// p, m and v (four floats) and of the gradients (four floats, or four bfloat16s in 64 bits)
// where the tensors line up (one vector of each of the four tensors in flight per thread: two
// took 80 registers, which blocks of 1024 threads cannot have), grid-stride
// (kiln_ops/cuda_common.cuh). The bias corrections are computed once per thread, not once per
// element; each element's arithmetic is the one the kernel always had (the CPU kernel multiplies by
// the inverse of the second correction instead of dividing by it).
#include <cuda_bf16.h>

#include "kiln_ops/cuda_common.cuh"

namespace {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Four gradients from element i (at a vector boundary), as floats.
__device__ __forceinline__ float4 load_grads(const float* g, long long i) { return kiln_ops::ldg(reinterpret_cast<const float4*>(g + i)); }
__device__ __forceinline__ float4 load_grads(const __nv_bfloat16* g, long long i) {
  const uint2 pairs = kiln_ops::ldg(reinterpret_cast<const uint2*>(g + i));
  float4 r;
  r.x = kiln_ops::bf16_low(pairs.x);
  r.y = kiln_ops::bf16_high(pairs.x);
  r.z = kiln_ops::bf16_low(pairs.y);
  r.w = kiln_ops::bf16_high(pairs.y);
  return r;
}

struct Moments {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, decay, step_size, bias2_sqrt, eps;

  // Updates m and v in place and returns the new parameter.
  __device__ float update(float p, float grad, float& m, float& v) const {
    m = beta1 * m + one_minus_beta1 * grad;
    v = beta2 * v + one_minus_beta2 * grad * grad;
    return p * decay - step_size * m / (sqrtf(v) / bias2_sqrt + eps);
  }
};

template <class Grad>
struct Step {
  float* p;
  const Grad* g;
  float* m;
  float* v;
  Moments k;
  struct Loaded {
    float4 p, g, m, v;
  };
  // p, m and v are written by this kernel: plain loads, not the read-only path.
  __device__ Loaded load(long long i) const {
    return {*reinterpret_cast<const float4*>(p + i), load_grads(g, i), *reinterpret_cast<const float4*>(m + i),
            *reinterpret_cast<const float4*>(v + i)};
  }
  __device__ void store(long long i, const Loaded& in) const {
    float4 pm = in.m, pv = in.v, pp;
    pp.x = k.update(in.p.x, in.g.x, pm.x, pv.x);
    pp.y = k.update(in.p.y, in.g.y, pm.y, pv.y);
    pp.z = k.update(in.p.z, in.g.z, pm.z, pv.z);
    pp.w = k.update(in.p.w, in.g.w, pm.w, pv.w);
    *reinterpret_cast<float4*>(m + i) = pm;
    *reinterpret_cast<float4*>(v + i) = pv;
    *reinterpret_cast<float4*>(p + i) = pp;
  }
  __device__ void one(long long i) const {
    float mi = m[i], vi = v[i];
    p[i] = k.update(p[i], to_float(g[i]), mi, vi);
    m[i] = mi;
    v[i] = vi;
  }
};

}  // namespace

template <class Grad>
__global__ void __launch_bounds__(1024) adamw_step(float* __restrict__ p, const Grad* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
                           float lr, float beta1, float beta2, float eps, float weight_decay, long long step, long long n) {
  Moments k;
  k.beta1 = beta1;
  k.beta2 = beta2;
  k.one_minus_beta1 = 1.f - beta1;
  k.one_minus_beta2 = 1.f - beta2;
  k.decay = 1.f - lr * weight_decay;
  k.step_size = lr / (1.f - powf(beta1, static_cast<float>(step)));
  k.bias2_sqrt = sqrtf(1.f - powf(beta2, static_cast<float>(step)));
  k.eps = eps;
  const int phase = kiln_ops::vector_phase<4>(p);
  const bool same = kiln_ops::vector_phase<4>(g) == phase && kiln_ops::vector_phase<4>(m) == phase &&
                    kiln_ops::vector_phase<4>(v) == phase;
  kiln_ops::for_each_element<4, 1>(n, kiln_ops::split<4>(n, phase, same), Step<Grad>{p, g, m, v, k});
}
