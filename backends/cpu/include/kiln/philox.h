/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
 * counter-based generator. The value for a counter and key is a pure function of the two, so
 * a kernel that draws element i from counter (offset + i / 4) gets the same numbers however
 * its blocks are scheduled. kiln's random-number state (runtime::RngState) is such a
 * (key = seed, offset) pair; this header is what host code and kernels (CPU, and CUDA through
 * NVRTC or Clang) share to draw from it. It includes no system header (see cpu_kernel.h). */
#ifndef KILN_PHILOX_H
#define KILN_PHILOX_H

#if defined(__CUDACC__) || defined(__CUDA__) || defined(__HIP__)
#define KILN_PHILOX_FN __host__ __device__ inline
#else
#define KILN_PHILOX_FN inline
#endif

namespace kiln::philox {

typedef __UINT32_TYPE__ u32;
typedef __UINT64_TYPE__ u64;

struct Block {
  u32 v[4];
};

KILN_PHILOX_FN u32 mulhilo(u32 a, u32 b, u32* hi) {
  u64 p = (u64)a * b;
  *hi = (u32)(p >> 32);
  return (u32)p;
}

// Ten rounds of Philox4x32 on `counter` with the 64-bit key split in two words.
KILN_PHILOX_FN Block philox4x32_10(Block c, u32 k0, u32 k1) {
  for (int round = 0; round < 10; ++round) {
    u32 hi0, hi1;
    u32 lo0 = mulhilo(0xD2511F53u, c.v[0], &hi0);
    u32 lo1 = mulhilo(0xCD9E8D57u, c.v[2], &hi1);
    Block n = {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    c = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The 128-bit block number `index` of the stream keyed by `seed`.
KILN_PHILOX_FN Block block_at(u64 seed, u64 index) {
  Block c = {{(u32)index, (u32)(index >> 32), 0u, 0u}};
  return philox4x32_10(c, (u32)seed, (u32)(seed >> 32));
}

// The i-th 32-bit value drawn from state (seed, offset).
KILN_PHILOX_FN u32 draw_u32(u64 seed, u64 offset, u64 i) { return block_at(seed, offset + i / 4).v[i % 4]; }

// A float uniform in [0, 1): the top 24 bits, so every value is exact.
KILN_PHILOX_FN float to_unit_float(u32 x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

}  // namespace kiln::philox

#endif /* KILN_PHILOX_H */
