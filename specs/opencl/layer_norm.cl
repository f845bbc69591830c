// Layer norm forward: a work-group per row, its sums reduced through local memory.
#include "kiln_ops/opencl_common.h"

__kernel void layer_norm(__global const float* restrict x, __global const float* restrict gamma,
                         __global const float* restrict beta, __global float* restrict y, long rows, long cols, float eps) {
  __local float scratch[1024];
  long row = get_group_id(0);
  if (row >= rows) return;  // the whole work-group leaves together
  __global const float* in = x + row * cols;
  __global float* out = y + row * cols;
  uint t = get_local_id(0), n = get_local_size(0);
  float sum = 0.f;
  for (long c = t; c < cols; c += n) sum += in[c];
  const float mean = group_sum(sum, scratch) / (float)cols;
  float squares = 0.f;
  for (long c = t; c < cols; c += n) squares += (in[c] - mean) * (in[c] - mean);
  const float rstd = rsqrt(group_sum(squares, scratch) / (float)cols + eps);
  for (long c = t; c < cols; c += n) out[c] = (in[c] - mean) * rstd * gamma[c] + beta[c];
}
