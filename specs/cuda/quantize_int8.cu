// Symmetric int8 quantisation with a scale per group, and its inverse. A team of lanes per group,
// as many as give each lane up to k_held vectors of 4 elements (a warp for groups of 512 or more;
// 8 lanes for groups of 128, so a warp does 4 groups at once), teams striding over the groups by
// the grid. Where the group is a multiple of 4 and the tensors line up, each lane moves four
// elements at once (16 bytes of float, 4 of int8), its k_held vectors loaded before any is used.
// quantize_int8 keeps them in registers between finding max|x| and writing q, so x is read once
// for groups of up to 512 (larger groups read the rest again, from the cache). The same float
// arithmetic as the CPU version, so the bytes agree. quantize_int8 takes blocks of up to 512
// threads: nvJitLink's ptxas gave it 112 registers for sm_80 (62 for sm_90), and at 64 (for
// 1024-thread blocks) it spilled (tests/builders/cuda_op_resources.txt).
#include "kiln_ops/cuda_common.cuh"

namespace {

constexpr int k_held = 4;  // vectors of 4 elements a lane loads at once (and quantize keeps)

// Lanes per group: the fewest (a power of two, 32 at most) that give each lane at most k_held
// vectors of 4 elements.
__device__ __forceinline__ int team_lanes_for(long long group) {
  int t = 1;
  while (t < 32 && static_cast<long long>(t) * 4 * k_held < group) t *= 2;
  return t;
}

__device__ __forceinline__ float abs_max4(float4 v) { return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))); }

__device__ __forceinline__ unsigned int quantize1(float x, float inv) {
  return static_cast<unsigned char>(static_cast<signed char>(rintf(__fmul_rn(x, inv))));
}
__device__ __forceinline__ unsigned int quantize4(float4 v, float inv) {
  return quantize1(v.x, inv) | (quantize1(v.y, inv) << 8) | (quantize1(v.z, inv) << 16) | (quantize1(v.w, inv) << 24);
}

__device__ __forceinline__ float4 dequantize4(unsigned int b, float scale) {
  float4 r;
  r.x = __fmul_rn(static_cast<float>(static_cast<signed char>(b & 0xffu)), scale);
  r.y = __fmul_rn(static_cast<float>(static_cast<signed char>((b >> 8) & 0xffu)), scale);
  r.z = __fmul_rn(static_cast<float>(static_cast<signed char>((b >> 16) & 0xffu)), scale);
  r.w = __fmul_rn(static_cast<float>(static_cast<signed char>(b >> 24)), scale);
  return r;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(512) quantize_int8(const float* __restrict__ x, signed char* __restrict__ q, float* __restrict__ scales,
                                         long long n, long long group) {
  const int lanes = team_lanes_for(group), per_warp = 32 / lanes;
  const int lane = static_cast<int>(threadIdx.x % lanes), team = static_cast<int>(threadIdx.x % 32) / lanes;
  const long long warps = kiln_ops::grid_threads() / 32;
  // Vectors where every group starts at a vector boundary of x (16 bytes) and of q (4 bytes).
  const bool vec = group % 4 == 0 && kiln_ops::vector_phase<4>(x) == 0 && kiln_ops::vector_phase<4>(q) == 0;
  // The loop runs alike for all 32 lanes of a warp (its teams' groups are consecutive), so every
  // lane takes part in every shuffle; a team past the last group does nothing else.
  for (long long first = kiln_ops::global_index() / 32 * per_warp; first * group < n; first += warps * per_warp) {
    const long long g = first + team, begin = g * group;
    const bool active = begin < n;
    const long long end = !active ? begin : begin + group < n ? begin + group : n;
    const long long vectors = vec ? (end - begin) / 4 : 0, rest = begin + vectors * 4;
    const float4* x4 = reinterpret_cast<const float4*>(x + begin);
    float4 held[k_held];
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = lane + static_cast<long long>(k) * lanes;
      if (j < vectors) {
        held[k] = kiln_ops::ldg(x4 + j);
        amax = fmaxf(amax, abs_max4(held[k]));
      }
    }
    for (long long j = lane + static_cast<long long>(k_held) * lanes; j < vectors; j += lanes) amax = fmaxf(amax, abs_max4(kiln_ops::ldg(x4 + j)));
    for (long long i = rest + lane; i < end; i += lanes) amax = fmaxf(amax, fabsf(kiln_ops::ldg(x + i)));
    for (int offset = lanes / 2; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float inv = amax > 0.f ? __fdiv_rn(127.f, amax) : 0.f;
    if (active && lane == 0) scales[g] = __fdiv_rn(amax, 127.f);
    unsigned int* q4 = reinterpret_cast<unsigned int*>(q + begin);
#pragma unroll
    for (int k = 0; k < k_held; ++k) {
      const long long j = lane + static_cast<long long>(k) * lanes;
      if (j < vectors) q4[j] = quantize4(held[k], inv);
    }
    for (long long j = lane + static_cast<long long>(k_held) * lanes; j < vectors; j += lanes) q4[j] = quantize4(kiln_ops::ldg(x4 + j), inv);
    for (long long i = rest + lane; i < end; i += lanes) q[i] = static_cast<signed char>(quantize1(kiln_ops::ldg(x + i), inv));
  }
}

extern "C" __global__ void __launch_bounds__(1024) dequantize_int8(const signed char* __restrict__ q, const float* __restrict__ scales,
                                           float* __restrict__ y, long long n, long long group) {
  const int lanes = team_lanes_for(group);
  const int lane = static_cast<int>(threadIdx.x % lanes);
  const long long teams = kiln_ops::grid_threads() / lanes;
  const bool vec = group % 4 == 0 && kiln_ops::vector_phase<4>(q) == 0 && kiln_ops::vector_phase<4>(y) == 0;
  for (long long g = kiln_ops::global_index() / lanes; g * group < n; g += teams) {
    const long long begin = g * group, end = begin + group < n ? begin + group : n;
    const long long vectors = vec ? (end - begin) / 4 : 0, rest = begin + vectors * 4;
    const float scale = kiln_ops::ldg(scales + g);
    const unsigned int* q4 = reinterpret_cast<const unsigned int*>(q + begin);
    float4* y4 = reinterpret_cast<float4*>(y + begin);
    for (long long j0 = lane; j0 < vectors; j0 += static_cast<long long>(k_held) * lanes) {
      unsigned int bytes[k_held];
#pragma unroll
      for (int k = 0; k < k_held; ++k) {
        const long long j = j0 + static_cast<long long>(k) * lanes;
        if (j < vectors) bytes[k] = kiln_ops::ldg(q4 + j);
      }
#pragma unroll
      for (int k = 0; k < k_held; ++k) {
        const long long j = j0 + static_cast<long long>(k) * lanes;
        if (j < vectors) y4[j] = dequantize4(bytes[k], scale);
      }
    }
    for (long long i = rest + lane; i < end; i += lanes) y[i] = __fmul_rn(static_cast<float>(kiln_ops::ldg(q + i)), scale);
  }
}
