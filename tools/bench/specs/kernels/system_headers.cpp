#include <cmath>
#include <vector>
#include <immintrin.h>
#include <kiln/cpu_kernel.h>

// y = tanh(x), through a staging vector.
void system_headers(const kiln::cpu::Block& b, const float* x, float* y, int64_t n) {
  int64_t begin = int64_t(kiln::cpu::first_thread(b)), end = std::min<int64_t>(n, begin + b.block_dim.x);
  std::vector<float> staged(x + begin, x + end);
  for (int64_t i = begin; i < end; ++i) y[i] = std::tanh(staged[i - begin]);
}
