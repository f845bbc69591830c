// Written for kiln's CUDA corpus: every cache-hinted load and store of the CUDA headers on the
// scalar, vector, half and bfloat16 types frameworks move with them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <class T>
__device__ void every_hint(T* p) {
  T a = __ldcg(p), b = __ldca(p + 1), c = __ldcs(p + 2), d = __ldlu(p + 3), e = __ldcv(p + 4), f = __ldg(p + 5);
  __stwb(p + 6, a);
  __stcg(p + 7, b);
  __stcs(p + 8, c);
  __stwt(p + 9, d);
  __stcs(p + 10, e);
  __stcg(p + 11, f);
}

#define KILN_CORPUS_HINTS(T) \
  extern "C" __global__ void hints_##T(T* p) { every_hint(p + 16 * threadIdx.x); }
typedef signed char schar;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef long long llong;
typedef unsigned long long ullong;
typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;
typedef __half half1;
KILN_CORPUS_HINTS(char) KILN_CORPUS_HINTS(schar) KILN_CORPUS_HINTS(uchar) KILN_CORPUS_HINTS(short) KILN_CORPUS_HINTS(ushort)
KILN_CORPUS_HINTS(int) KILN_CORPUS_HINTS(uint) KILN_CORPUS_HINTS(long) KILN_CORPUS_HINTS(llong) KILN_CORPUS_HINTS(ullong)
KILN_CORPUS_HINTS(float) KILN_CORPUS_HINTS(double) KILN_CORPUS_HINTS(char2) KILN_CORPUS_HINTS(char4) KILN_CORPUS_HINTS(uchar4)
KILN_CORPUS_HINTS(short2) KILN_CORPUS_HINTS(ushort4) KILN_CORPUS_HINTS(int2) KILN_CORPUS_HINTS(int4) KILN_CORPUS_HINTS(uint4)
KILN_CORPUS_HINTS(longlong2) KILN_CORPUS_HINTS(ulonglong2) KILN_CORPUS_HINTS(float2) KILN_CORPUS_HINTS(float4)
KILN_CORPUS_HINTS(double2) KILN_CORPUS_HINTS(half1) KILN_CORPUS_HINTS(__half2) KILN_CORPUS_HINTS(bf16) KILN_CORPUS_HINTS(bf162)

// A value of another type converts as it would to the overload's parameter.
extern "C" __global__ void cache_hints(float* y, const int* q) {
  __stcs(y + threadIdx.x, q[threadIdx.x]);
  __stwb(y + 64 + threadIdx.x, 2);
}
