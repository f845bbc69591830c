// y[r, :] = softmax(x[r, :]); one work-group per row, its work-items striding over the columns
// and reducing the max and the sum through local memory.
__kernel void row_softmax(__global const float* restrict x, __global float* restrict y, long rows, long cols) {
  __local float scratch[1024];
  long r = get_group_id(0);
  if (r >= rows) return;  // the whole work-group leaves together
  __global const float* in = x + r * cols;
  __global float* out = y + r * cols;
  uint t = get_local_id(0), n = get_local_size(0);

  float m = -3.402823466e38f;
  for (long c = t; c < cols; c += n) m = fmax(m, in[c]);
  scratch[t] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = n / 2; s > 0; s /= 2) {
    if (t < s) scratch[t] = fmax(scratch[t], scratch[t + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);

  float sum = 0.f;
  for (long c = t; c < cols; c += n) sum += exp(in[c] - m);
  scratch[t] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = n / 2; s > 0; s /= 2) {
    if (t < s) scratch[t] += scratch[t + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float inv = 1.f / scratch[0];
  for (long c = t; c < cols; c += n) out[c] = exp(in[c] - m) * inv;
}
