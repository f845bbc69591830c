// y[r, :] = softmax(x[r, :]): a team of warps per row (one warp for rows of up to 512 columns,
// the whole block for long rows: kiln_ops::row_team), teams striding over the rows by the grid;
// warp shuffles, and shared memory between the warps of a team. Where x and y line up, a row
// moves as float4s from its first 16-byte boundary and each thread keeps its float4s in
// registers (up to k_held: the whole row for rows of up to 16 x block columns), first x, then its
// exponentials, so the row is read from memory once and each exponential taken once; longer rows
// read the rest again from the cache. Tensors that do not line up go one element at a time.
// expf, as before (CUDA's: 2 ulp).
#include "kiln_ops/cuda_common.cuh"

namespace {

constexpr int k_held = 4;  // float4s of the row a thread keeps in registers
// Blocks of up to 512 threads: ptxas may then take up to 128 registers a thread, which the held
// row and its exponentials need for sm_80 (nvJitLink's ptxas took 103 there, 70 for sm_90;
// capped at 64 for 1024-thread blocks it spilled). tests/builders/cuda_op_resources.txt.
constexpr int k_max_block = 512;
constexpr int k_per_thread = 4 * k_held;  // a row takes more warps only when a warp cannot hold it
constexpr float k_lowest = -3.402823466e38f;

__device__ __forceinline__ float4 exp4(float4 v, float m) {
  v.x = expf(v.x - m);
  v.y = expf(v.y - m);
  v.z = expf(v.z - m);
  v.w = expf(v.w - m);
  return v;
}
__device__ __forceinline__ float4 scaled(float4 v, float s) {
  v.x *= s;
  v.y *= s;
  v.z *= s;
  v.w *= s;
  return v;
}

// The max and the sum over a team's row, to every thread of the team (and a block barrier when
// a team is more than a warp: every thread of the block calls them alike).
struct Reduce {
  kiln_ops::Team team;
  float* scratch;
  __device__ float max(float v) const {
    return kiln_ops::team_combine(kiln_ops::warp_combine(v, kiln_ops::Max()), team.warps, scratch, kiln_ops::Max());
  }
  __device__ float sum(float v) const {
    return kiln_ops::team_combine(kiln_ops::warp_combine(v, kiln_ops::Plus()), team.warps, scratch, kiln_ops::Plus());
  }
};

// Tensors that line up: float4s, held in registers.
__device__ void rows_by_vectors(const float* x, float* y, long long rows, long long cols, const Reduce& reduce) {
  const kiln_ops::Team& team = reduce.team;
  const long long stride = team.threads;
  kiln_ops::for_each_team_row(rows, team, [&](long long row) {
    const kiln_ops::TeamRow t = kiln_ops::team_row(x, y, rows, cols, row, team);
    float4 held[k_held];
    float e = t.has_edge ? kiln_ops::ldg(t.in + t.edge) : k_lowest;
    float m = e;
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) {
        held[k] = kiln_ops::ldg(t.in4 + j);
        m = fmaxf(m, kiln_ops::max4(held[k]));
      }
    }
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) m = fmaxf(m, kiln_ops::max4(kiln_ops::ldg(t.in4 + j)));
    m = reduce.max(m);

    e = t.has_edge ? expf(e - m) : 0.f;
    float sum = e;
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) {
        held[k] = exp4(held[k], m);
        sum += kiln_ops::sum4(held[k]);
      }
    }
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) sum += kiln_ops::sum4(exp4(kiln_ops::ldg(t.in4 + j), m));
    const float inv = 1.f / reduce.sum(sum);

#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) t.out4[j] = scaled(held[k], inv);
    }
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) t.out4[j] = scaled(exp4(kiln_ops::ldg(t.in4 + j), m), inv);
    if (t.has_edge) t.out[t.edge] = e * inv;
  });
}

// Tensors that do not line up: an element at a time, read again for each pass.
__device__ void rows_by_elements(const float* x, float* y, long long rows, long long cols, const Reduce& reduce) {
  const kiln_ops::Team& team = reduce.team;
  kiln_ops::for_each_team_row(rows, team, [&](long long row) {
    const kiln_ops::TeamRow t = kiln_ops::team_row(x, y, rows, cols, row, team);
    float m = k_lowest;
    for (long long c = team.rank; c < t.n; c += team.threads) m = fmaxf(m, kiln_ops::ldg(t.in + c));
    m = reduce.max(m);
    float sum = 0.f;
    for (long long c = team.rank; c < t.n; c += team.threads) sum += expf(kiln_ops::ldg(t.in + c) - m);
    const float inv = 1.f / reduce.sum(sum);
    for (long long c = team.rank; c < t.n; c += team.threads) t.out[c] = expf(kiln_ops::ldg(t.in + c) - m) * inv;
  });
}

}  // namespace

extern "C" __global__ void __launch_bounds__(k_max_block) row_softmax(const float* __restrict__ x, float* __restrict__ y, long long rows,
                                                                      long long cols) {
  __shared__ float scratch[32];
  const Reduce reduce{kiln_ops::row_team(cols, k_per_thread), scratch};
  // The same for every row and every thread of the grid: (x + r cols) and (y + r cols) are at
  // one offset from a vector boundary for every r when x and y are. (Written out here, not as a
  // helper: Clang's register use for sm_80 rose past the launch bounds with one.)
  const int phase = kiln_ops::vector_phase<4>(x);
  if (phase >= 0 && kiln_ops::vector_phase<4>(y) == phase) rows_by_vectors(x, y, rows, cols, reduce);
  else rows_by_elements(x, y, rows, cols, reduce);
}
