// The SIMD kernels: no torch here, only the SIMD layer and OpenMP.
#include <algorithm>

#include <omp.h>

#include "kiln_adam.h"

namespace kiln_test {

template <int Span>
std::size_t CpuAdam::step_tiles(std::size_t begin, std::size_t n, float* params,
                                const float* grads, float* exp_avg, float* exp_avg_sq,
                                float step_size, float inv_sqrt_bias2) const {
#if KSIMD_WIDTH > 1
  constexpr std::size_t tile = KSIMD_TILE(Span);
  const std::size_t whole = begin + ((n - begin) / tile) * tile;
  const ksimd_f32 beta1 = KSIMD_SET1(m_hyper.beta1);
  const ksimd_f32 beta2 = KSIMD_SET1(m_hyper.beta2);
  const ksimd_f32 one_minus_beta1 = KSIMD_SET1(1.0f - m_hyper.beta1);
  const ksimd_f32 one_minus_beta2 = KSIMD_SET1(1.0f - m_hyper.beta2);
  const ksimd_f32 eps = KSIMD_SET1(m_hyper.eps);
  const ksimd_f32 neg_step = KSIMD_SET1(-step_size);
  const ksimd_f32 inv_sqrt_b2 = KSIMD_SET1(inv_sqrt_bias2);
  const ksimd_f32 decay = KSIMD_SET1(m_hyper.weight_decay);
  const ksimd_f32 shrink = KSIMD_SET1(1.0f - m_hyper.lr * m_hyper.weight_decay);
  const bool has_decay = m_hyper.weight_decay != 0.0f;
  const bool adamw = m_hyper.adamw;

#pragma omp parallel for schedule(static)
  for (std::size_t t = begin; t < whole; t += tile) {
    ksimd_f32 p[Span], g[Span], m[Span], v[Span];
    for (int s = 0; s < Span; ++s) {
      const std::size_t i = t + static_cast<std::size_t>(s) * KSIMD_WIDTH;
      p[s] = KSIMD_LOAD(params + i);
      g[s] = KSIMD_LOAD(grads + i);
      m[s] = KSIMD_LOAD(exp_avg + i);
      v[s] = KSIMD_LOAD(exp_avg_sq + i);
    }
    for (int s = 0; s < Span; ++s) {
      if (has_decay) {
        if (adamw) {
          p[s] = KSIMD_MUL(p[s], shrink);
        } else {
          g[s] = KSIMD_ADD(g[s], KSIMD_MUL(p[s], decay));
        }
      }
      m[s] = KSIMD_ADD(KSIMD_MUL(m[s], beta1), KSIMD_MUL(g[s], one_minus_beta1));
      v[s] = KSIMD_ADD(KSIMD_MUL(v[s], beta2), KSIMD_MUL(KSIMD_MUL(g[s], g[s]), one_minus_beta2));
      const ksimd_f32 denom = KSIMD_ADD(KSIMD_MUL(KSIMD_SQRT(v[s]), inv_sqrt_b2), eps);
      p[s] = KSIMD_ADD(p[s], KSIMD_MUL(neg_step, KSIMD_DIV(m[s], denom)));
    }
    for (int s = 0; s < Span; ++s) {
      const std::size_t i = t + static_cast<std::size_t>(s) * KSIMD_WIDTH;
      KSIMD_STORE(params + i, p[s]);
      KSIMD_STORE(exp_avg + i, m[s]);
      KSIMD_STORE(exp_avg_sq + i, v[s]);
    }
  }
  return whole;
#else
  (void)n; (void)params; (void)grads; (void)exp_avg; (void)exp_avg_sq; (void)step_size;
  (void)inv_sqrt_bias2;
  return begin;
#endif
}

void CpuAdam::step_scalar(std::size_t begin, std::size_t n, float* params, const float* grads,
                          float* exp_avg, float* exp_avg_sq, float step_size,
                          float inv_sqrt_bias2) const {
  const AdamHyper& h = m_hyper;
  for (std::size_t i = begin; i < n; ++i) {
    float p = params[i];
    float g = grads[i];
    if (h.weight_decay != 0.0f) {
      if (h.adamw) {
        p *= 1.0f - h.lr * h.weight_decay;
      } else {
        g += p * h.weight_decay;
      }
    }
    const float m = exp_avg[i] * h.beta1 + g * (1.0f - h.beta1);
    const float v = exp_avg_sq[i] * h.beta2 + g * g * (1.0f - h.beta2);
    const float denom = std::sqrt(v) * inv_sqrt_bias2 + h.eps;
    params[i] = p - step_size * (m / denom);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

void CpuAdam::step(std::int64_t step, float* params, const float* grads, float* exp_avg,
                   float* exp_avg_sq, std::size_t n) const {
  const double bias1 = 1.0 - std::pow(static_cast<double>(m_hyper.beta1), step);
  const double bias2 = 1.0 - std::pow(static_cast<double>(m_hyper.beta2), step);
  const float step_size = static_cast<float>(m_hyper.lr / bias1);
  const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  // Wide tiles first, then narrower ones, then the scalar tail: DeepSpeed's Step_8/4/1 idea.
  std::size_t done = step_tiles<8>(0, n, params, grads, exp_avg, exp_avg_sq, step_size,
                                   inv_sqrt_bias2);
  done = step_tiles<4>(done, n, params, grads, exp_avg, exp_avg_sq, step_size, inv_sqrt_bias2);
  done = step_tiles<1>(done, n, params, grads, exp_avg, exp_avg_sq, step_size, inv_sqrt_bias2);
  step_scalar(done, n, params, grads, exp_avg, exp_avg_sq, step_size, inv_sqrt_bias2);
}

const char* simd_isa() { return KSIMD_ISA; }

}  // namespace kiln_test
