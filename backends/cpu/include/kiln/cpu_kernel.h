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

#include <stdint.h>

#define KILN_CPU_ABI_VERSION 1
#define KILN_CPU_ENTRY_PREFIX "kiln_entry_"

struct kiln_cpu_dim3 {
  uint32_t x, y, z;
};

struct kiln_cpu_block {
  struct kiln_cpu_dim3 grid_dim;   /* blocks in the launch */
  struct kiln_cpu_dim3 block_dim;  /* threads per block */
  struct kiln_cpu_dim3 block_idx;  /* this block */
};

typedef void (*kiln_cpu_entry_fn)(const struct kiln_cpu_block*, void* const* args);

#ifdef __cplusplus
namespace kiln::cpu {
using Block = kiln_cpu_block;
// Threads in a block, as one count (block_dim.x * y * z).
inline uint64_t threads_per_block(const Block& b) {
  return uint64_t{b.block_dim.x} * b.block_dim.y * b.block_dim.z;
}
// The linear index of the block's first thread in a 1-D launch.
inline uint64_t first_thread(const Block& b) { return uint64_t{b.block_idx.x} * b.block_dim.x; }
}  // namespace kiln::cpu
#endif

#endif /* KILN_CPU_KERNEL_H */
