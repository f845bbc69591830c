#include "kiln_ops/cuda_common.cuh"

// out[i] = a[i] + b[i]; one thread per element.
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                                      long long n) {
  long long i = kiln_ops::global_index();
  if (i < n) out[i] = a[i] + b[i];
}
