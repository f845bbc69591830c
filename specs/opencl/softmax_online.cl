// Softmax of each row with an online normaliser: each work-item keeps a running (max, sum) over
// its strided elements; each slice of 32 work-items merges its pairs into the launch's dynamic
// local memory (8 bytes per slice, the last kernel parameter), and every work-item merges those.
typedef struct {
  float max, sum;
} MaxSum;

// Two partial (max, sum) pairs as one: each sum rescaled to the larger maximum.
inline MaxSum merge(MaxSum a, MaxSum b) {
  float m = fmax(a.max, b.max);
  MaxSum r = {m, a.sum * native_exp(a.max - m) + b.sum * native_exp(b.max - m)};
  return r;
}

__kernel void softmax_online(__global const float* restrict x, __global float* restrict y, long rows, long cols,
                             __local MaxSum* slice_pairs) {
  __local MaxSum own_pairs[1024];
  long row = get_group_id(0);
  if (row >= rows) return;
  __global const float* in = x + row * cols;
  __global float* out = y + row * cols;
  uint t = get_local_id(0), n = get_local_size(0);
  MaxSum own = {-3.402823466e38f, 0.f};
  for (long c = t; c < cols; c += n) {
    MaxSum one = {in[c], 1.f};
    own = merge(own, one);
  }
  own_pairs[t] = own;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (t % 32 == 0) {
    MaxSum slice = own_pairs[t];
    for (uint i = t + 1; i < t + 32 && i < n; ++i) slice = merge(slice, own_pairs[i]);
    slice_pairs[t / 32] = slice;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  MaxSum row_pair = slice_pairs[0];
  for (uint w = 1; w < n / 32; ++w) row_pair = merge(row_pair, slice_pairs[w]);
  const float inv = 1.f / row_pair.sum;
  for (long c = t; c < cols; c += n) out[c] = native_exp(in[c] - row_pair.max) * inv;
}
