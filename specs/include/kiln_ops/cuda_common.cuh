// Helpers shared by the bundled CUDA kernels. Three compilers read them: NVRTC (no standard
// headers), Clang against the toolkit's headers, and Clang for AMD GPUs through
// kiln/hip_prelude.h; tests/builders/cuda_emulation runs them on the host. So they use only
// the built-in variables, float4/uint4/uint2, __ldg (through ldg below), __shfl_xor_sync and
// __syncthreads.
//
// What the bandwidth-bound kernels share (docs/CUDA-OPS.md says why each choice):
// - every thread strides over the whole problem by the grid's size, so any grid and block
//   cover it (callers that launch a thread per element, grid = cdiv(n, block), still work);
//   the specs' [cuda] grid sizes the grid to the device instead (sm_count);
// - 128-bit loads and stores where every tensor of the op sits at the same offset from a
//   vector boundary (whole tensors always do): the elements before the first boundary and
//   after the last vector one at a time, and everything one at a time when the tensors do not
//   line up;
// - several vectors loaded before any is stored, so a thread has more than one load in flight.
#pragma once

namespace kiln_ops {

// A load through the read-only data cache on NVIDIA GPUs (__ldg). HIP 5.2's headers, which
// hiprtc compiles against, declare __ldg for __half and __half2 only, and an AMD GPU has no such
// path: a plain load there.
template <class T>
__device__ __forceinline__ T ldg(const T* p) {
#if defined(__HIP__) || defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
  return *p;
#else
  return __ldg(p);
#endif
}

// The global index of this thread in a 1-D launch.
__device__ __forceinline__ long long global_index() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// Threads in the whole 1-D grid: the stride of a grid-stride loop.
__device__ __forceinline__ long long grid_threads() { return static_cast<long long>(gridDim.x) * blockDim.x; }

// Where `p` falls among vectors of V elements: its element offset past a V * sizeof(T) byte
// boundary (0 .. V-1), or a negative value, unequal to any offset, when `p` is not even
// aligned to its element.
template <int V, class T>
__device__ __forceinline__ int vector_phase(const T* p) {
  const unsigned long long address = reinterpret_cast<unsigned long long>(p);
  if (address % sizeof(T) != 0) return -1;
  return static_cast<int>((address / sizeof(T)) % V);
}

// How n elements split: [0, head) one at a time, then `vectors` aligned vectors of V elements,
// then the rest (under V) one at a time.
struct Split {
  long long head, vectors;
};

// The split for tensors whose vector phases are all `phase` (`same`: they are); tensors that do
// not line up take every element one at a time.
template <int V>
__device__ __forceinline__ Split split(long long n, int phase, bool same) {
  if (!same || phase < 0) return {n, 0};
  long long head = (V - phase) % V;
  if (head > n) head = n;
  return {head, (n - head) / V};
}

// Runs an elementwise op over elements [0, n) in a grid-stride loop:
//   f.one(i)              element i alone;
//   f.load(i) -> Loaded   the V elements from i (i at a vector boundary of every tensor);
//   f.store(i, loaded)    computes and stores them.
// U vectors are loaded before the first of them is stored.
template <int V, int U, class F>
__device__ __forceinline__ void for_each_element(long long n, Split s, const F& f) {
  const long long first = global_index(), stride = grid_threads();
  for (long long i = first; i < s.head; i += stride) f.one(i);
  long long v = first;
  for (; v + (U - 1) * stride < s.vectors; v += U * stride) {
    typename F::Loaded in[U];
#pragma unroll
    for (int u = 0; u < U; ++u) in[u] = f.load(s.head + (v + u * stride) * V);
#pragma unroll
    for (int u = 0; u < U; ++u) f.store(s.head + (v + u * stride) * V, in[u]);
  }
  for (; v < s.vectors; v += stride) f.store(s.head + v * V, f.load(s.head + v * V));
  for (long long i = s.head + s.vectors * V + first; i < n; i += stride) f.one(i);
}

// A bfloat16 pair packed in 32 bits (element 0 in the low half), widened exactly.
__device__ __forceinline__ float bf16_low(unsigned int pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_high(unsigned int pair) { return __uint_as_float(pair & 0xffff0000u); }

// ---- row ops: a team of warps per row

// `value` combined over the 32 lanes of each warp (every lane gets its warp's result).
template <class T, class Op>
__device__ __forceinline__ T warp_combine(T value, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// The team of warps a thread works in for rows of `cols` elements: its size doubles, while it
// divides the block's warps, until a thread has at most `per_thread` elements of a row. Short
// rows take a warp each (no block barrier in their reductions), long ones the whole block. The
// block must be a multiple of 32 threads.
struct Team {
  int warps, threads;  // a team's
  int per_block;       // teams in the block
  int index, rank;     // this thread's team in the block, and its rank in the team
};
__device__ __forceinline__ Team row_team(long long cols, int per_thread) {
  const int block_warps = static_cast<int>(blockDim.x / 32);
  int w = 1;
  while (block_warps % (w * 2) == 0 && static_cast<long long>(w) * 32 * per_thread < cols) w *= 2;
  const int threads = w * 32, t = static_cast<int>(threadIdx.x);
  return {w, threads, block_warps / w, t / threads, t % threads};
}

// `warp_value` (already combined over each warp) combined over the team's `team_warps` warps,
// through `scratch` (a value per warp of the block). With more than one warp a team, every
// thread of the block must call it: it synchronises the block.
template <class T, class Op>
__device__ __forceinline__ T team_combine(T warp_value, int team_warps, T* scratch, Op op) {
  if (team_warps == 1) return warp_value;
  const int warp = static_cast<int>(threadIdx.x / 32);
  if (threadIdx.x % 32 == 0) scratch[warp] = warp_value;
  __syncthreads();
  const int first = warp / team_warps * team_warps;
  T total = scratch[first];
  for (int w = 1; w < team_warps; ++w) total = op(total, scratch[first + w]);
  __syncthreads();  // `scratch` is written again by the next combination
  return total;
}

// A row of `cols` floats whose tensors line up (every tensor that moves with the row sits at the
// row's offset from a 16-byte boundary; a property of the tensors, so the same for every row):
// float4 vectors from its first 16-byte boundary, [head, head + 4 * vectors), and its `edges`
// other elements, at most 3 before and 3 after, which threads 0 .. edges-1 of its team take one
// each (edge_column). Rows of tensors that do not line up go one element at a time instead.
struct RowSplit {
  long long head, vectors, edges;
  // The column of edge e.
  __device__ long long edge_column(long long e) const { return e < head ? e : e + 4 * vectors; }
};
__device__ __forceinline__ RowSplit row_split(long long cols, int phase) {
  const Split s = split<4>(cols, phase, true);
  return {s.head, s.vectors, cols - 4 * s.vectors};
}

// This thread's share of the row its team has in one pass of a row loop: the row's columns (0
// for a team past the last row: it works on nothing, but still takes part in its block's
// reductions), where the row starts in x and y, and, for tensors that line up, its float4s and
// the edge element this thread takes.
struct TeamRow {
  long long n;  // the row's columns, or 0
  const float* in;
  float* out;
  RowSplit split;
  const float4* in4;  // the row's float4s
  float4* out4;
  bool has_edge;
  long long edge;  // this thread's edge element's column, when has_edge
};
__device__ __forceinline__ TeamRow team_row(const float* x, float* y, long long rows, long long cols, long long row, const Team& team) {
  TeamRow t;
  const bool active = row < rows;
  t.n = active ? cols : 0;
  t.in = x + (active ? row : 0) * cols;
  t.out = y + (active ? row : 0) * cols;
  t.split = row_split(t.n, vector_phase<4>(t.in));
  t.in4 = reinterpret_cast<const float4*>(t.in + t.split.head);
  t.out4 = reinterpret_cast<float4*>(t.out + t.split.head);
  t.has_edge = team.rank < t.split.edges;
  t.edge = t.split.edge_column(team.rank);
  return t;
}

// Calls f(row) for each row of [0, rows) this thread's team takes: teams stride over the rows by
// the grid, and every thread of a block makes the same calls (a team past the last row gets a
// row >= rows), so the team reductions' block barriers line up.
template <class F>
__device__ __forceinline__ void for_each_team_row(long long rows, const Team& team, F f) {
  for (long long first = static_cast<long long>(blockIdx.x) * team.per_block; first < rows;
       first += static_cast<long long>(gridDim.x) * team.per_block)
    f(first + team.index);
}

__device__ __forceinline__ float max4(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ __forceinline__ float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

struct Plus {
  __device__ float operator()(float a, float b) const { return a + b; }
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

}  // namespace kiln_ops
