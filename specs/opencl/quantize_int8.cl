// Symmetric int8 quantisation with a scale per group: 32 work-items per group (a "warp"), its
// max|x| reduced through local memory. The same float arithmetic as the CPU version, so the bytes
// agree (built with -cl-fp32-correctly-rounded-divide-sqrt, as C's division is).
__kernel void quantize_int8(__global const float* restrict x, __global char* restrict q, __global float* restrict scales,
                            long n, long group) {
  __local float lane_max[1024];
  __local float group_amax[32];
  const uint t = get_local_id(0), lane = t % 32, slot = t / 32;
  const long g = (long)get_group_id(0) * (get_local_size(0) / 32) + slot;
  const long begin = g * group, end = begin + group < n ? begin + group : n;
  float amax = 0.f;
  for (long i = begin + lane; i < end; i += 32) amax = fmax(amax, fabs(x[i]));
  lane_max[t] = amax;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    for (uint i = 1; i < 32; ++i) amax = fmax(amax, lane_max[t + i]);
    group_amax[slot] = amax;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (begin >= n) return;  // past the end (after the barriers every work-item must reach)
  amax = group_amax[slot];
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  if (lane == 0) scales[g] = amax / 127.f;
  for (long i = begin + lane; i < end; i += 32) q[i] = (char)rint(x[i] * inv);
}

__kernel void dequantize_int8(__global const char* restrict q, __global const float* restrict scales, __global float* restrict y,
                              long n, long group) {
  const long g = (long)get_group_id(0) * (get_local_size(0) / 32) + get_local_id(0) / 32;
  const long begin = g * group, end = begin + group < n ? begin + group : n;
  if (begin >= n) return;
  const float scale = scales[g];
  for (long i = begin + get_local_id(0) % 32; i < end; i += 32) y[i] = (float)q[i] * scale;
}
