// Written for kiln's CUDA corpus: device state and functions defined in one translation unit and
// used from another through extern __device__ declarations (relocatable device code).
__device__ float g_bias = 0.5f;
__device__ unsigned long long g_calls = 0;

__device__ float affine(float x, float a) {
  atomicAdd(&g_calls, 1ull);
  return a * x + g_bias;
}
