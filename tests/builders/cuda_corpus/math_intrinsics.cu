// Written for kiln's CUDA corpus: the fast-math, rounding and integer intrinsics of the CUDA math
// API that activation and quantization kernels call.
#include <cstdint>

extern "C" __global__ void math_intrinsics(const float* x, float* y, const unsigned* u, unsigned* w, const int* a, int* b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i];
  float s, c;
  __sincosf(v, &s, &c);
  sincospif(v, &s, &c);
  y[i] = __expf(v) + __logf(fabsf(v) + 1.0f) + __fdividef(v, 3.0f) + __saturatef(v) + __frcp_rn(v + 2.0f) +
         __fsqrt_rn(fabsf(v)) + __fmaf_rn(v, v, 1.0f) + rsqrtf(v * v + 1.0f) + erff(v) + normcdff(v) + s + c +
         tanhf(v) + __powf(2.0f, v) + exp2f(v) + log1pf(fabsf(v)) + __fmul_rz(v, v) + __fadd_rd(v, 1.0f);
  unsigned x32 = u[i];
  w[i] = __brev(x32) + __clz(x32) + __ffs(x32) + __popc(x32) + __byte_perm(x32, x32 >> 3, 0x0123) +
         __funnelshift_l(x32, x32 >> 1, 7) + __umulhi(x32, 0x9e3779b9u) + __usad(x32, 5u, 1u) + __umul24(x32, 3u) +
         (unsigned)__popcll((unsigned long long)x32 << 20);
  b[i] = __dp4a(a[i], a[i + 1], 7) + __dp2a_lo(a[i], a[i + 1], 1) + __mulhi(a[i], 3) + __sad(a[i], 2, 0u) + __hadd(a[i], 9) +
         __vabsdiffs4(a[i], 3) + __vmaxu2(a[i], 0x00100010);
}
