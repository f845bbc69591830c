// Layer norm forward: a team of warps per row (one warp for rows of up to 512 columns, the whole
// block for long rows: kiln_ops::row_team), teams striding over the rows by the grid. Where x and
// y line up, a row moves as float4s from its first 16-byte boundary (gamma and beta too, when
// they line up with it) and each thread keeps its float4s in registers (up to k_held: the whole
// row for rows of up to 12 x block columns), so x is read from memory once for the mean, the
// variance and the output; longer rows read the rest again from the cache for each pass. Tensors
// that do not line up go one element at a time. Each warp reduces with cooperative groups
// (cg::reduce); the warps of a team meet in shared memory. The mean, then the squared deviations
// from it (two passes, as the CPU kernel and PyTorch's CPU kernel do).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "kiln_ops/cuda_common.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int k_held = 3;  // float4s of the row a thread keeps in registers (4 spilled 8 bytes through Clang for sm_80)
// Blocks of up to 512 threads: ptxas may then take up to 128 registers a thread, which the held
// row needs for sm_80 (tests/builders/cuda_op_resources.txt; capped at 64 for 1024-thread
// blocks, the softmax kernels spilled).
constexpr int k_max_block = 512;
constexpr int k_per_thread = 4 * k_held;  // a row takes more warps only when a warp cannot hold it

// gamma or beta from column c (a vector boundary of the row) as a float4: one load where they
// line up with the row, else four. Two types, not a branch per load: Clang merged such a
// branch's loads into four scalar ones.
struct VectorParams {
  __device__ static float4 load(const float* p, long long c) { return kiln_ops::ldg(reinterpret_cast<const float4*>(p + c)); }
};
struct ScalarParams {
  __device__ static float4 load(const float* p, long long c) {
    float4 v;
    v.x = kiln_ops::ldg(p + c);
    v.y = kiln_ops::ldg(p + c + 1);
    v.z = kiln_ops::ldg(p + c + 2);
    v.w = kiln_ops::ldg(p + c + 3);
    return v;
  }
};

__device__ __forceinline__ float squares4(float4 v, float mean) {
  const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
  return (a * a + b * b) + (c * c + d * d);
}
__device__ __forceinline__ float4 normalised4(float4 v, float mean, float rstd, float4 g, float4 b) {
  v.x = (v.x - mean) * rstd * g.x + b.x;
  v.y = (v.y - mean) * rstd * g.y + b.y;
  v.z = (v.z - mean) * rstd * g.z + b.z;
  v.w = (v.w - mean) * rstd * g.w + b.w;
  return v;
}

// The sum over a team's row, to every thread of the team (a block barrier when a team is more
// than a warp: every thread of the block calls it alike).
struct Reduce {
  kiln_ops::Team team;
  float* scratch;
  __device__ float operator()(float v) const {
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    return kiln_ops::team_combine(cg::reduce(warp, v, cg::plus<float>()), team.warps, scratch, kiln_ops::Plus());
  }
};

// Tensors that line up: float4s, held in registers. Params: how gamma and beta load.
template <class Params>
__device__ void rows_by_vectors(const float* x, const float* gamma, const float* beta, float* y, long long rows, long long cols, float eps,
                                const Reduce& sum_of) {
  const kiln_ops::Team& team = sum_of.team;
  const long long stride = team.threads;
  kiln_ops::for_each_team_row(rows, team, [&](long long row) {
    const kiln_ops::TeamRow t = kiln_ops::team_row(x, y, rows, cols, row, team);
    float4 held[k_held];
    const float e = t.has_edge ? kiln_ops::ldg(t.in + t.edge) : 0.f;
    float sum = e;
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) {
        held[k] = kiln_ops::ldg(t.in4 + j);
        sum += kiln_ops::sum4(held[k]);
      }
    }
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) sum += kiln_ops::sum4(kiln_ops::ldg(t.in4 + j));
    const float mean = sum_of(sum) / static_cast<float>(cols);

    float squares = t.has_edge ? (e - mean) * (e - mean) : 0.f;
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) squares += squares4(held[k], mean);
    }
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) squares += squares4(kiln_ops::ldg(t.in4 + j), mean);
    const float rstd = rsqrtf(sum_of(squares) / static_cast<float>(cols) + eps);

#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) {
        const long long c = t.split.head + 4 * j;
        t.out4[j] = normalised4(held[k], mean, rstd, Params::load(gamma, c), Params::load(beta, c));
      }
    }
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) {
      const long long c = t.split.head + 4 * j;
      t.out4[j] = normalised4(kiln_ops::ldg(t.in4 + j), mean, rstd, Params::load(gamma, c), Params::load(beta, c));
    }
    if (t.has_edge) t.out[t.edge] = (e - mean) * rstd * kiln_ops::ldg(gamma + t.edge) + kiln_ops::ldg(beta + t.edge);
  });
}

// Tensors that do not line up: an element at a time, read again for each pass.
__device__ void rows_by_elements(const float* x, const float* gamma, const float* beta, float* y, long long rows, long long cols, float eps,
                                 const Reduce& sum_of) {
  const kiln_ops::Team& team = sum_of.team;
  kiln_ops::for_each_team_row(rows, team, [&](long long row) {
    const kiln_ops::TeamRow t = kiln_ops::team_row(x, y, rows, cols, row, team);
    float sum = 0.f;
    for (long long c = team.rank; c < t.n; c += team.threads) sum += kiln_ops::ldg(t.in + c);
    const float mean = sum_of(sum) / static_cast<float>(cols);
    float squares = 0.f;
    for (long long c = team.rank; c < t.n; c += team.threads) squares += (kiln_ops::ldg(t.in + c) - mean) * (kiln_ops::ldg(t.in + c) - mean);
    const float rstd = rsqrtf(sum_of(squares) / static_cast<float>(cols) + eps);
    for (long long c = team.rank; c < t.n; c += team.threads) t.out[c] = (kiln_ops::ldg(t.in + c) - mean) * rstd * kiln_ops::ldg(gamma + c) + kiln_ops::ldg(beta + c);
  });
}

}  // namespace

extern "C" __global__ void __launch_bounds__(k_max_block) layer_norm(const float* __restrict__ x, const float* __restrict__ gamma,
                                                                     const float* __restrict__ beta, float* __restrict__ y, long long rows,
                                                                     long long cols, float eps) {
  __shared__ float scratch[32];
  const Reduce sum_of{kiln_ops::row_team(cols, k_per_thread), scratch};
  // All decided once for the whole grid: (x + r cols) and (y + r cols) are at one offset from a
  // vector boundary for every r when x and y are, and gamma and beta line up with every row
  // when they are at x's offset and cols is a multiple of 4.
  const int phase = kiln_ops::vector_phase<4>(x);
  if (phase < 0 || kiln_ops::vector_phase<4>(y) != phase) return rows_by_elements(x, gamma, beta, y, rows, cols, eps, sum_of);
  const int params = kiln_ops::vector_phase<4>(gamma);
  if (cols % 4 == 0 && params == phase && kiln_ops::vector_phase<4>(beta) == phase)
    rows_by_vectors<VectorParams>(x, gamma, beta, y, rows, cols, eps, sum_of);
  else
    rows_by_vectors<ScalarParams>(x, gamma, beta, y, rows, cols, eps, sum_of);
}
