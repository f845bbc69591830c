// Written for kiln's CUDA corpus: libcu++ (cuda::std) in device code, as CCCL-era kernels use it.
#include <cuda/std/array>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <cuda/std/type_traits>
#include <cuda/std/utility>

template <class T, cuda::std::size_t N>
__device__ T largest(const cuda::std::array<T, N>& a) {
  T best = cuda::std::numeric_limits<T>::lowest();
  for (auto v : a) best = v > best ? v : best;
  return best;
}

extern "C" __global__ void cuda_std(const float* x, float* y, cuda::std::int64_t n) {
  static_assert(cuda::std::is_same_v<cuda::std::remove_cv_t<const float>, float>, "libcu++ traits");
  cuda::std::int64_t i = blockIdx.x * (cuda::std::int64_t)blockDim.x + threadIdx.x;
  if (i + 3 >= n) return;
  cuda::std::array<float, 4> a{x[i], x[i + 1], x[i + 2], x[i + 3]};
  cuda::std::pair<float, float> p = cuda::std::make_pair(largest(a), cuda::std::numeric_limits<float>::epsilon());
  y[i] = p.first + p.second;
}
