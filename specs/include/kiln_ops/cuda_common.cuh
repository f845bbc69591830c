// Helpers shared by the bundled CUDA kernels (NVRTC: no standard headers needed).
#pragma once

namespace kiln_ops {

// The global index of this thread in a 1-D launch.
__device__ inline long long global_index() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

}  // namespace kiln_ops
