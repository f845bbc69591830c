// Softmax of each row with an online normaliser: (max, sum) pairs, each sum taken against its
// own maximum and rescaled when pairs merge, so the statistics need one pass over the row. A
// team of warps per row (one warp for rows of up to 512 columns, the whole block for long rows:
// kiln_ops::row_team), teams striding over the rows by the grid; pairs merge across a warp with
// shuffles and across a team's warps in shared memory. Where x and y line up, a row moves as
// float4s from its first 16-byte boundary and each thread keeps its float4s in registers (up to
// k_held: the whole row for rows of up to 16 x block columns), so the row is read from memory
// once; longer rows read the rest again from the cache, merging a pair per vector. Tensors that
// do not line up go one element at a time. __expf (ex2.approx), as before. The launch's dynamic
// shared memory is not used any more (the pairs of at most 32 warps are static shared memory):
// a launch that passes some still works.
#include "kiln_ops/cuda_common.cuh"

namespace {

constexpr int k_held = 4;  // float4s of the row a thread keeps in registers
// Blocks of up to 512 threads: ptxas may then take up to 128 registers a thread, which the held
// row and its exponentials need for sm_80 (tests/builders/cuda_op_resources.txt; capped at 64 for
// 1024-thread blocks it spilled).
constexpr int k_max_block = 512;
constexpr int k_per_thread = 4 * k_held;  // a row takes more warps only when a warp cannot hold it
constexpr float k_lowest = -3.402823466e38f;

struct MaxSum {
  float max, sum;
};

// Two partial (max, sum) pairs as one: each sum rescaled to the larger maximum.
struct Merge {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float m = fmaxf(a.max, b.max);
    return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
  }
};

__device__ __forceinline__ float exp_sum4(float4 v, float m) {
  return (__expf(v.x - m) + __expf(v.y - m)) + (__expf(v.z - m) + __expf(v.w - m));
}
__device__ __forceinline__ float4 out4(float4 v, float m, float inv) {
  v.x = __expf(v.x - m) * inv;
  v.y = __expf(v.y - m) * inv;
  v.z = __expf(v.z - m) * inv;
  v.w = __expf(v.w - m) * inv;
  return v;
}

// A thread's pair merged over its team's row, to every thread of the team (a block barrier when a
// team is more than a warp: every thread of the block calls it alike).
struct Reduce {
  kiln_ops::Team team;
  MaxSum* scratch;
  __device__ MaxSum operator()(MaxSum own) const {
    const Merge merge;
    for (int offset = 16; offset > 0; offset /= 2)
      own = merge(own, MaxSum{__shfl_xor_sync(0xffffffffu, own.max, offset), __shfl_xor_sync(0xffffffffu, own.sum, offset)});
    return kiln_ops::team_combine(own, team.warps, scratch, merge);
  }
};

// Tensors that line up: float4s, held in registers.
__device__ void rows_by_vectors(const float* x, float* y, long long rows, long long cols, const Reduce& reduce) {
  const kiln_ops::Team& team = reduce.team;
  const long long stride = team.threads;
  const Merge merge;
  kiln_ops::for_each_team_row(rows, team, [&](long long row) {
    const kiln_ops::TeamRow t = kiln_ops::team_row(x, y, rows, cols, row, team);
    // The held vectors and the edge element: their maximum first, then their sum against it.
    float4 held[k_held];
    const float e = t.has_edge ? kiln_ops::ldg(t.in + t.edge) : k_lowest;
    MaxSum own{e, 0.f};
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) {
        held[k] = kiln_ops::ldg(t.in4 + j);
        own.max = fmaxf(own.max, kiln_ops::max4(held[k]));
      }
    }
    own.sum = t.has_edge ? __expf(e - own.max) : 0.f;
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) own.sum += exp_sum4(held[k], own.max);
    }
    // The rest a pair per vector.
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) {
      const float4 v = kiln_ops::ldg(t.in4 + j);
      const float m = kiln_ops::max4(v);
      own = merge(own, MaxSum{m, exp_sum4(v, m)});
    }
    const MaxSum row_pair = reduce(own);
    const float inv = 1.f / row_pair.sum;

#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = team.rank + k * stride;
      if (j < t.split.vectors) t.out4[j] = out4(held[k], row_pair.max, inv);
    }
    for (long long j = team.rank + k_held * stride; j < t.split.vectors; j += stride) t.out4[j] = out4(kiln_ops::ldg(t.in4 + j), row_pair.max, inv);
    if (t.has_edge) t.out[t.edge] = __expf(e - row_pair.max) * inv;
  });
}

// Tensors that do not line up: an element at a time, read again for the output.
__device__ void rows_by_elements(const float* x, float* y, long long rows, long long cols, const Reduce& reduce) {
  const kiln_ops::Team& team = reduce.team;
  const Merge merge;
  kiln_ops::for_each_team_row(rows, team, [&](long long row) {
    const kiln_ops::TeamRow t = kiln_ops::team_row(x, y, rows, cols, row, team);
    MaxSum own{k_lowest, 0.f};
    for (long long c = team.rank; c < t.n; c += team.threads) own = merge(own, MaxSum{kiln_ops::ldg(t.in + c), 1.f});
    const MaxSum row_pair = reduce(own);
    const float inv = 1.f / row_pair.sum;
    for (long long c = team.rank; c < t.n; c += team.threads) t.out[c] = __expf(kiln_ops::ldg(t.in + c) - row_pair.max) * inv;
  });
}

}  // namespace

extern "C" __global__ void __launch_bounds__(k_max_block) softmax_online(const float* __restrict__ x, float* __restrict__ y, long long rows,
                                                                         long long cols) {
  __shared__ MaxSum scratch[32];
  const Reduce reduce{kiln_ops::row_team(cols, k_per_thread), scratch};
  // The same for every row and every thread of the grid: (x + r cols) and (y + r cols) are at
  // one offset from a vector boundary for every r when x and y are. (Written out here, not as a
  // helper: Clang's register use for sm_80 rose past the launch bounds with one.)
  const int phase = kiln_ops::vector_phase<4>(x);
  if (phase >= 0 && kiln_ops::vector_phase<4>(y) == phase) rows_by_vectors(x, y, rows, cols, reduce);
  else rows_by_elements(x, y, rows, cols, reduce);
}
