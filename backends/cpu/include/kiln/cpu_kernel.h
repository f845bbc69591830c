/* The ABI between kiln's CPU backend and the kernels it runs. Kernel sources include it
 * (kiln adds its folder to every CPU compile); the backend includes it to call them.
 *
 * A CPU kernel is a C++ function called once per block of the grid:
 *     void vector_add(const kiln::cpu::Block& b, const float* x, ..., int64_t n);
 * It loops over the block's threads itself, which lets the compiler vectorise that loop.
 * kiln generates, from the spec's parameter list, an extern "C" entry point
 *     void kiln_entry_<name>(const kiln_cpu_block*, void* const* args)
 * that unpacks the arguments and calls it. Blocks of one launch run concurrently on a
 * worker pool, in no particular order. */
#ifndef KILN_CPU_KERNEL_H
#define KILN_CPU_KERNEL_H

/* The fixed-width types, from the compiler's own macros rather than <stdint.h>: a kernel that
 * includes no system header has a key that does not depend on the machine's C library, so
 * an artifact built on one node is found by nodes with another OS image. (Repeating these
 * typedefs is harmless where <stdint.h> is included too: they name the same types.) */
typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __SIZE_TYPE__ size_t;

#define KILN_CPU_ABI_VERSION 2  /* 2: dynamic shared memory */
#define KILN_CPU_ENTRY_PREFIX "kiln_entry_"

struct kiln_cpu_dim3 {
  uint32_t x, y, z;
};

struct kiln_cpu_block {
  struct kiln_cpu_dim3 grid_dim;   /* blocks in the launch */
  struct kiln_cpu_dim3 block_dim;  /* threads per block */
  struct kiln_cpu_dim3 block_idx;  /* this block */
  /* The launch's dynamic shared memory: this block's own scratch of `shared_bytes` bytes,
   * 64-byte aligned and uninitialised, as CUDA's extern __shared__ memory is (null when 0). */
  void* shared;
  uint64_t shared_bytes;
};

typedef void (*kiln_cpu_entry_fn)(const struct kiln_cpu_block*, void* const* args);

#ifdef __cplusplus
namespace kiln::cpu {
using Block = kiln_cpu_block;
// Threads in a block, as one count (block_dim.x * y * z).
inline uint64_t threads_per_block(const Block& b) {
  return uint64_t{b.block_dim.x} * b.block_dim.y * b.block_dim.z;
}
#if defined(__clang__)  // kernels are compiled by Clang; kiln itself (g++ 12) has no __bf16
// The half types of specs ("half", "bfloat16"): Clang's _Float16 and __bf16, which compute
// through float on CPUs without native support.
using half = _Float16;
using bfloat16 = __bf16;
#endif
// The block's dynamic shared memory as an array of T (LaunchConfig::shared_bytes).
template <class T>
inline T* shared_memory(const Block& b) {
  return static_cast<T*>(b.shared);
}
// The linear index of the block's first thread in a 1-D launch.
inline uint64_t first_thread(const Block& b) { return uint64_t{b.block_idx.x} * b.block_dim.x; }
}  // namespace kiln::cpu
#endif

#endif /* KILN_CPU_KERNEL_H */
