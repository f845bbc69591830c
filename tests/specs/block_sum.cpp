#include <kiln/cpu_kernel.h>
// Stages the block's elements in its dynamic shared memory, then sums them from there.
template <class T, int B>
void block_sum(const kiln::cpu::Block& b, const T* x, T* out, int64_t n) {
  T* staged = kiln::cpu::shared_memory<T>(b);
  int64_t base = int64_t(kiln::cpu::first_thread(b));
  for (int t = 0; t < B; ++t) staged[t] = base + t < n ? x[base + t] : T(0);
  T sum = 0;
  for (int t = 0; t < B; ++t) sum += staged[t];
  out[b.block_idx.x] = sum;
}
void block_sum_reference(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i / 128] += x[i];
}
