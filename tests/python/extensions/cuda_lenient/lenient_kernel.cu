// Written as some frameworks' kernels are: a narrowing conversion inside braces. nvcc's front end
// accepts it with a warning (#2361-D, "invalid narrowing conversion"), as g++ does; Clang refuses
// it ("non-constant-expression cannot be narrowed", an error in C++11 and later). kiln compiles
// this source with the toolkit's nvcc as its last resort.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

__global__ void clamp_index_kernel(int* __restrict__ out, const int* __restrict__ x, int limit, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  short pair[2] = {x[i], limit};  // narrowing int -> short: nvcc warns, Clang refuses
  out[i] = pair[0] < pair[1] ? pair[0] : pair[1];
}

at::Tensor clamp_index_cuda(const at::Tensor& x, int64_t limit) {
  const at::cuda::OptionalCUDAGuard guard(x.device());
  auto out = at::empty_like(x);
  const int64_t n = x.numel();
  clamp_index_kernel<<<static_cast<int>((n + 127) / 128), 128, 0, at::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<int>(), x.data_ptr<int>(), static_cast<int>(limit), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
