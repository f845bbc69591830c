// One AdamW step over fp32 parameters with fp32 or bf16 gradients: a thread per element.
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class Grad>
__global__ void adamw_step(float* __restrict__ p, const Grad* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
                           float lr, float beta1, float beta2, float eps, float weight_decay, long long step, long long n) {
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float step_size = lr / (1.f - powf(beta1, static_cast<float>(step)));
  const float bias2_sqrt = sqrtf(1.f - powf(beta2, static_cast<float>(step)));
  float grad = to_float(g[i]);
  float mi = beta1 * m[i] + (1.f - beta1) * grad;
  float vi = beta2 * v[i] + (1.f - beta2) * grad * grad;
  m[i] = mi;
  v[i] = vi;
  p[i] = p[i] * (1.f - lr * weight_decay) - step_size * mi / (sqrtf(vi) / bias2_sqrt + eps);
}
