#include "kiln_ops/cuda_common.cuh"

// y = alpha * x + beta * y; one thread per element.
extern "C" __global__ void axpby(float alpha, const float* __restrict__ x, float beta, float* __restrict__ y, long long n) {
  long long i = kiln_ops::global_index();
  if (i < n) y[i] = alpha * x[i] + beta * y[i];
}
