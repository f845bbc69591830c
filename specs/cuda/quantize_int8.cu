// Symmetric int8 quantisation with a scale per group: a warp per group, its max|x| found with
// shuffles. The same float arithmetic as the CPU version, so the bytes agree.
extern "C" __global__ void quantize_int8(const float* __restrict__ x, signed char* __restrict__ q, float* __restrict__ scales,
                                         long long n, long long group) {
  const long long g = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  long long begin = g * group, end = begin + group < n ? begin + group : n;
  if (begin >= n) return;  // a whole warp leaves together
  float amax = 0.f;
  for (long long i = begin + lane; i < end; i += 32) amax = fmaxf(amax, fabsf(x[i]));
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float inv = amax > 0.f ? __fdiv_rn(127.f, amax) : 0.f;
  if (lane == 0) scales[g] = __fdiv_rn(amax, 127.f);
  for (long long i = begin + lane; i < end; i += 32) q[i] = static_cast<signed char>(rintf(__fmul_rn(x[i], inv)));
}

extern "C" __global__ void dequantize_int8(const signed char* __restrict__ q, const float* __restrict__ scales,
                                           float* __restrict__ y, long long n, long long group) {
  const long long g = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  long long begin = g * group, end = begin + group < n ? begin + group : n;
  if (begin >= n) return;
  const float scale = scales[g];
  for (long long i = begin + threadIdx.x % 32; i < end; i += 32) y[i] = __fmul_rn(static_cast<float>(q[i]), scale);
}
