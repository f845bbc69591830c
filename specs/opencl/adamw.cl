// One AdamW step over fp32 parameters with fp32 (adamw) or bf16 (adamw_bf16) gradients: a
// work-item per element. One body, two kernels, as the CUDA version's template.
#include "kiln_ops/opencl_common.h"

inline float grad_float(float g) { return g; }
inline float grad_bf16(ushort g) { return bf16_to_float(g); }

// The bias corrections are the same for every element: one work-item of each work-group computes
// them (pow is a slow scalar call on CPU devices such as PoCL), the others read them.
#define KILN_ADAMW(NAME, GRAD_T, TO_FLOAT)                                                                                \
  __kernel void NAME(__global float* restrict p, __global const GRAD_T* restrict g, __global float* restrict m,           \
                     __global float* restrict v, float lr, float beta1, float beta2, float eps, float weight_decay,       \
                     long step, long n) {                                                                                 \
    __local float corrections[2];                                                                                         \
    if (get_local_id(0) == 0) {                                                                                           \
      corrections[0] = lr / (1.f - pow(beta1, (float)step));                                                              \
      corrections[1] = sqrt(1.f - pow(beta2, (float)step));                                                               \
    }                                                                                                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                                         \
    long i = get_global_id(0);                                                                                            \
    if (i >= n) return;                                                                                                   \
    const float step_size = corrections[0], bias2_sqrt = corrections[1];                                                  \
    float grad = TO_FLOAT(g[i]);                                                                                          \
    float mi = beta1 * m[i] + (1.f - beta1) * grad;                                                                       \
    float vi = beta2 * v[i] + (1.f - beta2) * grad * grad;                                                                \
    m[i] = mi;                                                                                                            \
    v[i] = vi;                                                                                                            \
    p[i] = p[i] * (1.f - lr * weight_decay) - step_size * mi / (sqrt(vi) / bias2_sqrt + eps);                             \
  }

KILN_ADAMW(adamw, float, grad_float)
KILN_ADAMW(adamw_bf16, ushort, grad_bf16)
