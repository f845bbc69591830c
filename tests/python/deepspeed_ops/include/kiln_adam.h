// A CPU Adam/AdamW in the shape of DeepSpeed's: optimizer objects kept by id on the C++ side, a
// templated step unrolled over `Span` SIMD registers per tile, OpenMP over tiles, and a scalar
// tail. Numerics follow torch.optim.Adam / AdamW (bias corrections, eps added after the square
// root) so the tests can compare against them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kiln_simd.h"

namespace kiln_test {

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adamw = true;
};

class CpuAdam {
 public:
  explicit CpuAdam(const AdamHyper& hyper) : m_hyper(hyper) {}

  const AdamHyper& hyper() const { return m_hyper; }
  void set_lr(float lr) { m_hyper.lr = lr; }

  // One optimizer step over `n` fp32 elements; `step` counts from 1.
  void step(std::int64_t step, float* params, const float* grads, float* exp_avg,
            float* exp_avg_sq, std::size_t n) const;

 private:
  // Updates whole tiles of KSIMD_TILE(Span) elements from `begin`; returns where it stopped.
  template <int Span>
  std::size_t step_tiles(std::size_t begin, std::size_t n, float* params, const float* grads,
                         float* exp_avg, float* exp_avg_sq, float step_size,
                         float inv_sqrt_bias2) const;

  void step_scalar(std::size_t begin, std::size_t n, float* params, const float* grads,
                   float* exp_avg, float* exp_avg_sq, float step_size,
                   float inv_sqrt_bias2) const;

  AdamHyper m_hyper;
};

// The registry that the Python side drives through ids, as DeepSpeed's cpu_adam does.
int registry_size();
const char* simd_isa();

}  // namespace kiln_test
