// One AdamW step, as torch.optim.AdamW (decoupled weight decay) and DeepSpeed's FusedAdam do it,
// over fp32 parameters with fp32 or bf16 gradients. Each block updates a contiguous slice of the
// parameter tensor; the loop over it is what Clang vectorises, for whatever vector width the
// target's CPU level has (SSE4.2 for x86-64-v2, AVX2 for v3, AVX-512 for v4).
//
// The square root is __builtin_elementwise_sqrt, not __builtin_sqrtf: sqrtf of a negative
// number must set errno, so Clang kept a branch to libm's sqrtf in the loop and left it scalar
// ("loop not vectorized"; 23 instructions per element under callgrind at x86-64-v3, 3.2 ns per
// element on one core at v4). The elementwise builtin is the same correctly rounded square
// root without errno: 2.4 instructions per element, 0.40 ns, the same bits.
#include "kiln_ops/common.h"
#include "kiln_ops/vector_math.h"

// Adam's bias corrections for one step. The second as a factor, so each element divides once
// (as DeepSpeed's Step_AVX does), not twice: a division is the slowest vector instruction here,
// and on a CPU whose AVX-512 runs on 256-bit units (AMD's Zen 4) it is split in two. The result
// moves by an ulp at most, within the spec's tolerance of the double-precision reference.
struct BiasCorrections {
  float beta1 = 0.f, beta2 = 0.f;
  int64_t step = -1;  // matches no call: the first block of a thread computes
  float bias1 = 1.f, inv_bias2_sqrt = 1.f;
  BiasCorrections() = default;
  BiasCorrections(float b1, float b2, int64_t s)
      : beta1(b1), beta2(b2), step(s), bias1(1.f - __builtin_powf(b1, static_cast<float>(s))),
        inv_bias2_sqrt(1.f / __builtin_sqrtf(1.f - __builtin_powf(b2, static_cast<float>(s)))) {}
};

template <class Grad>
void adamw_step(const kiln::cpu::Block& b, float* __restrict p, const Grad* __restrict g, float* __restrict m,
                float* __restrict v, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                int64_t n) {
  kiln_ops::Range r = kiln_ops::block_range(b, n);
  // Per step, not per element: the bias corrections and the decay factor. The two powf calls
  // were most of a block's fixed cost (56 ns of a 4096-element block's ~2 us at memory speed:
  // 2-3% of a step), and every block of a launch computes the same, so each thread keeps the
  // last step's.
  static thread_local BiasCorrections t_last;
  if (t_last.beta1 != beta1 || t_last.beta2 != beta2 || t_last.step != step) t_last = BiasCorrections(beta1, beta2, step);
  const float step_size = lr / t_last.bias1;
  const float inv_bias2_sqrt = t_last.inv_bias2_sqrt;
  const float decay = 1.f - lr * weight_decay;
  // Four vectors an iteration, each array's loads together (as DeepSpeed's span of 8 does): one
  // vector an iteration left the step 4-5% slower at memory speed on a 2-core AMD EPYC (Zen 4),
  // interleaving 2, 4 or 8 all recovered it (docs/history/2026-12-04-cpu-adamw-openmp.md).
#pragma omp simd
#pragma clang loop interleave_count(4)
  for (int64_t i = r.begin; i < r.end; ++i) {
    float grad = kiln_ops::to_float(g[i]);
    float mi = beta1 * m[i] + (1.f - beta1) * grad;
    float vi = beta2 * v[i] + (1.f - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (__builtin_elementwise_sqrt(vi) * inv_bias2_sqrt + eps);
  }
}

// The same step in double precision, one element after another.
template <class Grad>
static void adamw_reference_step(float* p, const Grad* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                                 float weight_decay, int64_t step, int64_t n) {
  double bias1 = 1.0 - __builtin_pow(double(beta1), double(step)), bias2 = 1.0 - __builtin_pow(double(beta2), double(step));
  for (int64_t i = 0; i < n; ++i) {
    double grad = static_cast<double>(static_cast<float>(g[i]));
    double mi = beta1 * double(m[i]) + (1.0 - beta1) * grad;
    double vi = beta2 * double(v[i]) + (1.0 - beta2) * grad * grad;
    double pi = double(p[i]) * (1.0 - double(lr) * weight_decay);
    p[i] = static_cast<float>(pi - lr / bias1 * mi / (__builtin_sqrt(vi) / __builtin_sqrt(bias2) + eps));
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
  }
}

void adamw_reference(float* p, const float* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int64_t step, int64_t n) {
  adamw_reference_step(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step, n);
}

void adamw_bf16_reference(float* p, const __bf16* g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int64_t step, int64_t n) {
  adamw_reference_step(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step, n);
}
