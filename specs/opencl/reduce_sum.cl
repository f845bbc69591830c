// The sum of each chunk of elements: the work-group strides over its chunk, then reduces its
// work-items' sums through local memory (what cub::BlockReduce does on CUDA).
#include "kiln_ops/opencl_common.h"

__kernel void reduce_sum(__global const float* restrict x, __global float* restrict partial, long n, long chunk) {
  __local float scratch[1024];
  const long begin = (long)get_group_id(0) * chunk, end = begin + chunk < n ? begin + chunk : n;
  float sum = 0.f;
  for (long i = begin + get_local_id(0); i < end; i += get_local_size(0)) sum += x[i];
  float total = group_sum(sum, scratch);
  if (get_local_id(0) == 0) partial[get_group_id(0)] = total;
}
