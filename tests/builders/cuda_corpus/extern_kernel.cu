// Written for kiln's CUDA corpus: the kernel half of the two-unit op (extern_state.cu defines
// what these declarations name).
extern __device__ float g_bias;
extern __device__ unsigned long long g_calls;
__device__ float affine(float x, float a);

extern "C" __global__ void extern_kernel(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = affine(x[i], a) - g_bias + (float)(g_calls > 0);
}
