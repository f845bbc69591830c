// Written for kiln's CUDA corpus: sm_90 thread-block clusters through cooperative groups
// (distributed shared memory, cluster barriers), with the DPX integer instructions and a
// __grid_constant__ parameter; an sm_80 build keeps a per-block path.
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

struct Params {
  const int* x;
  int* y;
  int n;
};

// Clusters are an sm_90 feature: nvcc refuses __cluster_dims__ when compiling for sm_80.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KILN_CORPUS_CLUSTER
#else
#define KILN_CORPUS_CLUSTER __cluster_dims__(2, 1, 1)
#endif

extern "C" __global__ void KILN_CORPUS_CLUSTER hopper_cluster(const __grid_constant__ Params p) {
  __shared__ int partial[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < p.n ? p.x[i] : 0;
  partial[threadIdx.x] = __vimax3_s32(v, -v, 0) + __viaddmax_s32(v, 1, 0);
#if __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  int* other = cluster.map_shared_rank(partial, cluster.block_rank() ^ 1);
  int sum = partial[threadIdx.x] + other[threadIdx.x];
  cluster.sync();
#else
  __syncthreads();
  int sum = 2 * partial[threadIdx.x];
#endif
  if (i < p.n) p.y[i] = sum;
}
