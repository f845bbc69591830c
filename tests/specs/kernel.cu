extern __device__ float scale;
__device__ float helper(float x);
extern "C" __global__ void two_sources(const float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = helper(x[i]) * scale;
}
