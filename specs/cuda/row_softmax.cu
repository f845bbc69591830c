// y[r, :] = softmax(x[r, :]); one block per row, its threads striding over the columns and
// reducing the max and the sum through shared memory.
extern "C" __global__ void row_softmax(const float* __restrict__ x, float* __restrict__ y, long long rows, long long cols) {
  __shared__ float scratch[1024];
  long long r = blockIdx.x;
  if (r >= rows) return;
  const float* in = x + r * cols;
  float* out = y + r * cols;
  unsigned t = threadIdx.x, n = blockDim.x;

  float m = -3.402823466e38f;
  for (long long c = t; c < cols; c += n) m = fmaxf(m, in[c]);
  scratch[t] = m;
  __syncthreads();
  for (unsigned s = n / 2; s > 0; s /= 2) {
    if (t < s) scratch[t] = fmaxf(scratch[t], scratch[t + s]);
    __syncthreads();
  }
  m = scratch[0];
  __syncthreads();

  float sum = 0.f;
  for (long long c = t; c < cols; c += n) sum += expf(in[c] - m);
  scratch[t] = sum;
  __syncthreads();
  for (unsigned s = n / 2; s > 0; s /= 2) {
    if (t < s) scratch[t] += scratch[t + s];
    __syncthreads();
  }
  float inv = 1.f / scratch[0];
  for (long long c = t; c < cols; c += n) out[c] = expf(in[c] - m) * inv;
}
