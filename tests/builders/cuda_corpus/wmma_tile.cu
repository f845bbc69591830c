// Written for kiln's CUDA corpus: a warp-level matrix multiply through the WMMA API (half inputs,
// float accumulators), as tensor-core kernels without CUTLASS write it.
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

extern "C" __global__ void wmma_tile(const __half* a, const __half* b, float* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a + blockIdx.x * 256, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  for (int k = 0; k < acc.num_elements; ++k) acc.x[k] *= 0.5f;
  wmma::store_matrix_sync(c + blockIdx.x * 256, acc, 16, wmma::mem_row_major);
}
