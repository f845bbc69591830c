__device__ float scale = 2.0f;
__device__ float helper(float x) { return x * 3.0f + 1.0f; }
