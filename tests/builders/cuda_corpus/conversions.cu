// Written for kiln's CUDA corpus: the half and bfloat16 conversions and arithmetic mixed-precision
// kernels use (scalars and pairs, rounding modes, to and from integers), as frameworks write them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" __global__ void conversions(const float* x, __half* h, __nv_bfloat16* b, int* n, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i];
  __half hv = __float2half_rn(v);
  __nv_bfloat16 bv = __float2bfloat16(v);
  __half2 h2 = __floats2half2_rn(v, 2.0f * v);
  __nv_bfloat162 b2 = __float22bfloat162_rn(make_float2(v, -v));
  h2 = __hfma2(h2, __half2half2(hv), h2);
  b2 = __hmul2(b2, __bfloat162bfloat162(bv));
  h[i] = __hadd(__low2half(h2), __high2half(h2));
  b[i] = __hmax(__low2bfloat16(b2), __high2bfloat16(b2));
  n[i] = __half2int_rn(hv) + __bfloat162int_rn(bv) + __float2int_rn(v);
  __half hi = __int2half_rn(n[i]);
  __nv_bfloat16 bi = __int2bfloat16_rn(n[i]);
  float2 f2 = __half22float2(h2);
  y[i] = __half2float(hi) + __bfloat162float(bi) + f2.x + __low2float(b2) + (float)__double2bfloat16((double)v) +
         __half2float(__hdiv(hv, __float2half(3.0f))) + (__hisnan(hv) ? 1.0f : 0.0f) + __bfloat162float(__hneg(bv));
  h[i + 1] = hv * hv + __float2half(1.0f);  // operators on __half
  b[i + 1] = bv * bv - __float2bfloat16(1.0f);
}
