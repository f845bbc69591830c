// Written for kiln's CUDA corpus in the style of llm.c's layer norm: bf16 activations moved 128
// bits at a time with cache-streaming loads and stores, one warp per row, cooperative groups'
// reduce for the row's sums.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_bf16.h>

#include <cstring>

namespace cg = cooperative_groups;
typedef __nv_bfloat16 floatX;

template <class E>
struct alignas(16) Packed128 {
  Packed128() = default;
  __device__ explicit Packed128(int4 bits) { std::memcpy(&payload, &bits, sizeof(bits)); }
  __device__ E& operator[](int i) { return payload[i]; }
  __device__ const E& operator[](int i) const { return payload[i]; }
  __device__ int4 bits() const {
    int4 out;
    std::memcpy(&out, &payload, sizeof(out));
    return out;
  }
  static constexpr int size = sizeof(int4) / sizeof(E);
  E payload[size];
};
typedef Packed128<floatX> x128;

__device__ x128 load128cs(const floatX* p) { return x128(__ldcs(reinterpret_cast<const int4*>(p))); }
__device__ x128 load128(const floatX* p) { return x128(*reinterpret_cast<const int4*>(p)); }
__device__ void store128cs(floatX* p, const x128& v) { __stcs(reinterpret_cast<int4*>(p), v.bits()); }
__device__ void store128cg(floatX* p, const x128& v) { __stcg(reinterpret_cast<int4*>(p), v.bits()); }

extern "C" __global__ void __launch_bounds__(256) llmc_layernorm(floatX* __restrict__ out, float* __restrict__ mean,
                                                                 float* __restrict__ rstd, const floatX* __restrict__ inp,
                                                                 const floatX* __restrict__ weight,
                                                                 const floatX* __restrict__ bias, int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (row >= N) return;
  const floatX* x = inp + (size_t)row * C;
  float sum = 0.0f;
  for (int i = warp.thread_rank() * x128::size; i < C; i += warp.size() * x128::size) {
    x128 v = load128cs(x + i);
    for (int k = 0; k < x128::size; ++k) sum += (float)v[k];
  }
  float m = cg::reduce(warp, sum, cg::plus<float>()) / C;
  float var = 0.0f;
  for (int i = warp.thread_rank() * x128::size; i < C; i += warp.size() * x128::size) {
    x128 v = load128cs(x + i);
    for (int k = 0; k < x128::size; ++k) {
      float d = (float)v[k] - m;
      var += d * d;
    }
  }
  float s = rsqrtf(cg::reduce(warp, var, cg::plus<float>()) / C + 1e-5f);
  for (int i = warp.thread_rank() * x128::size; i < C; i += warp.size() * x128::size) {
    x128 v = load128cs(x + i), w = load128(weight + i), b = load128(bias + i), o;
    for (int k = 0; k < x128::size; ++k) o[k] = (floatX)(((float)v[k] - m) * s * (float)w[k] + (float)b[k]);
    if (row % 2) store128cs(out + (size_t)row * C + i, o);
    else store128cg(out + (size_t)row * C + i, o);
  }
  if (warp.thread_rank() == 0) {
    __stcs(mean + row, m);
    __stcs(rstd + row, s);
  }
}
