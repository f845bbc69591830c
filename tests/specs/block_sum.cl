// The OpenCL version of block_sum<float, 128>: the launch's dynamic local memory arrives as the
// last parameter.
__kernel void block_sum_f32(__global const float* x, __global float* out, long n, __local float* staged) {
  uint t = get_local_id(0), b = get_local_size(0);
  long i = (long)get_group_id(0) * b + t;
  staged[t] = i < n ? x[i] : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = b / 2; s > 0; s /= 2) {
    if (t < s) staged[t] += staged[t + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (t == 0) out[get_group_id(0)] = staged[0];
}
