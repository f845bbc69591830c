// Written for kiln's CUDA corpus: warp votes, shuffles, matches and reductions, and the atomics
// (float, double, half2, bfloat162, 16-bit CAS) that optimizer and reduction kernels use.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" __global__ void warp_atomics(const float* x, float* sum, double* dsum, __half2* h2, __nv_bfloat162* b2,
                                        unsigned* counts, unsigned short* tags, unsigned long long* when) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = __ldg(x + i);
  unsigned mask = __activemask();
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(mask, v, offset);
  unsigned votes = __ballot_sync(0xffffffffu, v > 0.0f);
  unsigned peers = __match_any_sync(0xffffffffu, (int)v);
#if __CUDA_ARCH__ >= 800
  unsigned total = __reduce_add_sync(0xffffffffu, __popc(votes));
#else
  unsigned total = __popc(votes) * 32;
#endif
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(sum, v);
    atomicAdd(dsum, (double)v);
    atomicAdd(h2, __floats2half2_rn(v, 1.0f));
#if __CUDA_ARCH__ >= 800
    atomicAdd(b2, __floats2bfloat162_rn(v, 1.0f));
#endif
    atomicMax(counts, total + __popc(peers));
    atomicCAS(tags + blockIdx.x, (unsigned short)0, (unsigned short)threadIdx.x);
    __threadfence();
    __nanosleep(100);
    when[blockIdx.x] = clock64();
  }
}
