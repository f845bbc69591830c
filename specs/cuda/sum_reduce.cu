// out[0] += sum(x): each block reduces its slice in double through shared memory, then adds
// it atomically (double atomicAdd needs sm_60).
extern "C" __global__ void sum_reduce(const float* __restrict__ x, double* out, long long n) {
  __shared__ double scratch[1024];
  unsigned t = threadIdx.x, threads = blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * threads + t;
  scratch[t] = i < n ? static_cast<double>(x[i]) : 0.0;
  __syncthreads();
  for (unsigned s = threads / 2; s > 0; s /= 2) {
    if (t < s) scratch[t] += scratch[t + s];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, scratch[0]);
}
