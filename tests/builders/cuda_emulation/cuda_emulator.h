// CUDA's execution model on the host, for running the bundled CUDA kernels (specs/cuda/*.cu) as
// they are written, where no GPU is: tests/builders/cuda_emulation_test.cpp includes each kernel
// source after this header and launches it here.
//
// What it models: a grid of blocks run one after another; each block's threads as fibers
// (ucontext) on one OS thread, switched only at __syncthreads, __syncwarp and warp shuffles, so a
// block's threads see its shared memory (`__shared__` is `static`) as on a GPU; threadIdx,
// blockIdx, blockDim and gridDim; full-mask shuffles with CUDA's width semantics; __ldg; the
// vector types at CUDA's alignment (so UBSan's alignment check catches a misaligned 128-bit
// access, as the GPU would fault). The library headers kernels include (cuda_bf16.h, cooperative
// groups, CUB's BlockReduce) come from backends/hip/include: kiln's own CUDA-semantics versions,
// written on these primitives.
//
// What it checks that a GPU would punish: a __syncthreads that not every live thread of the block
// reaches (or reached after some exited), a full-mask warp operation without every lane of the
// warp (a partial warp, an exited lane), a deadlock; each is an EmulationError naming the block,
// the thread and the kernel. What it does not model: concurrency between blocks, memory ordering,
// the device's math (tanhf, expf and __expf are the host's: a kernel's last bits can differ from
// the GPU's; its indexing, tails, alignment and reductions are what this checks).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
};

extern dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};

namespace emu {

// A launch the GPU would refuse or a kernel that would hang or misbehave on one.
struct EmulationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs `body` as every thread of every block of the grid. Blocks of at most 1024 threads.
void run_grid(dim3 grid, dim3 block, const std::string& kernel, const std::function<void()>& body);

// Barriers: the calling thread waits until every thread of its block (every lane of its warp)
// has arrived.
void block_barrier();
void warp_barrier(unsigned mask);

// This thread's lane and the 64-bit slots its warp exchanges values through.
unsigned lane_id();
uint64_t* warp_slots();

// A warp shuffle: every lane publishes `v`, then takes the value of lane source(lane).
template <class T, class Source>
T shuffle(unsigned mask, T v, Source source) {
  static_assert(sizeof(T) <= 8, "shuffles move 32- or 64-bit values");
  uint64_t* slots = warp_slots();
  const unsigned lane = lane_id();
  std::memcpy(&slots[lane], &v, sizeof(T));
  warp_barrier(mask);
  T out;
  std::memcpy(&out, &slots[source(static_cast<int>(lane))], sizeof(T));
  warp_barrier(mask);  // every lane has read before any writes again
  return out;
}

template <class... Params, class... Args>
void launch(dim3 grid, dim3 block, const std::string& name, void (*kernel)(Params...), Args... args) {
  run_grid(grid, block, name, [&] { kernel(static_cast<Params>(args)...); });
}

}  // namespace emu

inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask); }

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return emu::shuffle(mask, v, [&](int lane) { return (lane & ~(width - 1)) + (src & (width - 1)); });
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return emu::shuffle(mask, v, [&](int lane) {
    int src = lane ^ lane_mask;
    return (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane;
  });
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::shuffle(mask, v, [&](int lane) {
    int src = lane + static_cast<int>(delta);
    return (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane;
  });
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::shuffle(mask, v, [&](int lane) {
    int src = lane - static_cast<int>(delta);
    return src >= (lane & ~(width - 1)) ? src : lane;
  });
}

template <class T>
T __ldg(const T* p) {
  return *p;
}
inline float __uint_as_float(unsigned int u) { return __builtin_bit_cast(float, u); }
inline unsigned int __float_as_uint(float f) { return __builtin_bit_cast(unsigned int, f); }

// The host's math (expf, tanhf, sqrtf, powf, rintf... are libm's; the device's differ in their
// last bits, see above), and CUDA's own functions built on it.
inline float __expf(float x) { return std::exp2(x * 1.4426950408889634f); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
// Correctly rounded, never fused (the test is compiled with -ffp-contract=off).
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }

// Blocks run one after another and a block's threads never preempt each other: a plain add.
inline double atomicAdd(double* p, double v) {
  double old = *p;
  *p = old + v;
  return old;
}
inline float atomicAdd(float* p, float v) {
  float old = *p;
  *p = old + v;
  return old;
}
