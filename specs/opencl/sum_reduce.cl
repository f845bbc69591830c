// out[0] += sum(x): each work-group reduces its slice in double through local memory, then
// adds it with a compare-and-swap loop (OpenCL has no atomic add on double).
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable

void atomic_add_double(volatile __global double* target, double value) {
  volatile __global long* bits = (volatile __global long*)target;
  long seen = *bits, expected;
  do {
    expected = seen;
    seen = atom_cmpxchg(bits, expected, as_long(as_double(expected) + value));
  } while (seen != expected);
}

__kernel void sum_reduce(__global const float* restrict x, __global double* out, long n) {
  __local double scratch[1024];
  uint t = get_local_id(0), threads = get_local_size(0);
  long i = (long)get_group_id(0) * threads + t;
  scratch[t] = i < n ? (double)x[i] : 0.0;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = threads / 2; s > 0; s /= 2) {
    if (t < s) scratch[t] += scratch[t + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (t == 0) atomic_add_double(out, scratch[0]);
}
