// Symmetric int8 quantisation with a scale per group: a warp per group, its max|x| found with
// shuffles. The same float arithmetic as the CPU version, so the bytes agree.
extern "C" __global__ void quantize_int8(const float* __restrict__ x, signed char* __restrict__ q, float* __restrict__ scales,
                                         long long n, long long group) {
  long long begin = static_cast<long long>(blockIdx.x) * group, end = begin + group < n ? begin + group : n;
  if (begin >= n) return;
  float amax = 0.f;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) amax = fmaxf(amax, fabsf(x[i]));
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float inv = amax > 0.f ? __fdiv_rn(127.f, amax) : 0.f;
  if (threadIdx.x == 0) scales[blockIdx.x] = __fdiv_rn(amax, 127.f);
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) q[i] = static_cast<signed char>(rintf(__fmul_rn(x[i], inv)));
}

extern "C" __global__ void dequantize_int8(const signed char* __restrict__ q, const float* __restrict__ scales,
                                           float* __restrict__ y, long long n, long long group) {
  long long begin = static_cast<long long>(blockIdx.x) * group, end = begin + group < n ? begin + group : n;
  if (begin >= n) return;
  const float scale = scales[blockIdx.x];
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) y[i] = __fmul_rn(static_cast<float>(q[i]), scale);
}
