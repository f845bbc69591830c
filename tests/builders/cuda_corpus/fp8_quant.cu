// Written for kiln's CUDA corpus: FP8 (e4m3, e5m2) quantization with a per-block scale, as
// framework quantizers write it with the toolkit's cuda_fp8.h types.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

extern "C" __global__ void fp8_quant(const __nv_bfloat16* x, __nv_fp8_e4m3* q, __nv_fp8_e5m2* g, float* scale, float* back) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = __bfloat162float(x[i]);
  float amax = fabsf(v);
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  float s = amax > 0.0f ? 448.0f / amax : 1.0f;
  q[i] = __nv_fp8_e4m3(v * s);
  g[i] = __nv_fp8_e5m2(v);
  __nv_fp8x2_e4m3 pair(make_float2(v, -v));
  back[i] = float(q[i]) / s + float(g[i]) + float2(pair).x;
  if ((threadIdx.x & 31) == 0) scale[i / 32] = 1.0f / s;
}
