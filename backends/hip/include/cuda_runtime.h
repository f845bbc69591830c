// <cuda_runtime.h> for CUDA sources compiled for AMD GPUs: what kernels use of it (built-in
// variables, __syncthreads, atomics, math) kiln/hip_prelude.h already defines.
#pragma once
