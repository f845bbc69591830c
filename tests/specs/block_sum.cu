template <class T, int B>
__global__ void block_sum(const T* x, T* out, long long n) {
  extern __shared__ unsigned char shared_bytes[];
  T* staged = reinterpret_cast<T*>(shared_bytes);
  long long i = (long long)blockIdx.x * B + threadIdx.x;
  staged[threadIdx.x] = i < n ? x[i] : T(0);
  __syncthreads();
  for (int s = B / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) staged[threadIdx.x] += staged[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = staged[0];
}
