// Written for kiln's CUDA corpus: the scoped atomic built-ins of CUDA 12.8 and newer
// (__nv_atomic_*), which nvcc and NVRTC provide and Clang 22 does not, in a kernel that also
// includes cooperative groups (so the default route tries Clang first and must fall back).
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

extern "C" __global__ void scoped_atomic(int* counter, int* flag, int* y) {
  cg::thread_block block = cg::this_thread_block();
  int ticket = __nv_atomic_fetch_add(counter, 1, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_DEVICE);
  if (block.thread_rank() == 0) __nv_atomic_store_n(flag, 1, __NV_ATOMIC_RELEASE, __NV_THREAD_SCOPE_BLOCK);
  block.sync();
  y[blockIdx.x * blockDim.x + threadIdx.x] = ticket + __nv_atomic_load_n(flag, __NV_ATOMIC_ACQUIRE, __NV_THREAD_SCOPE_BLOCK);
}
