// The OpenCL version of two_sources: one program, its helper in a header of its own.
#include "two_sources_helper.h"

__kernel void two_sources(__global const float* x, __global float* y, long n) {
  long i = get_global_id(0);
  if (i < n) y[i] = helper(x[i]) * scale;
}
