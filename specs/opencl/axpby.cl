// y = alpha * x + beta * y; one work-item per element.
__kernel void axpby(float alpha, __global const float* restrict x, float beta, __global float* restrict y, long n) {
  long i = get_global_id(0);
  if (i < n) y[i] = alpha * x[i] + beta * y[i];
}
