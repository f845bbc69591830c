// GELU with the tanh approximation (torch.nn.functional.gelu(approximate="tanh")), on fp32 or
// bf16 tensors; bf16 computes through float, as PyTorch does. 0.5 x (1 + tanh(u)) is computed
// as x / (1 + e^(-2u)), the same function with one exponential and one division, and the loop
// vectorises: the exponential comes from kiln_ops/vector_math.h, not libm.
#include "kiln_ops/common.h"
#include "kiln_ops/vector_math.h"

template <class T>
static void gelu_of(const T* __restrict x, T* __restrict y, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float v = kiln_ops::to_float(x[i]);
    // -2u = -2 sqrt(2 / pi) (x + 0.044715 x^3), its constants folded: 3 operations, not 5.
    float minus_2u = v * (-1.5957691216057308f + -0.07135481627260025f * (v * v));
    float g = v / (1.f + kiln_ops::exp_approx(minus_2u));
    // Past 88.3 the exponential is held at e^88.3 (a normal float), so g would be v / 2.2e38:
    // that is -4e-38 at x = -9.5 (the result is under 1e-37 there) but -1.5 at x = -3.4e38.
    // The result there is 0 (its sign v's; a NaN stays a NaN).
    y[i] = kiln_ops::from_float(minus_2u <= 88.3f ? g : v * 0.f, y);
  }
}

template <class T>
void gelu(const kiln::cpu::Block& b, const T* __restrict x, T* __restrict y, int64_t n) {
  kiln_ops::Range r = kiln_ops::block_range(b, n);
  gelu_of(x, y, r.begin, r.end);
}

// bf16: a bfloat16 has 65536 values, so their GELUs are a table of 128 KiB (it stays in L2),
// made once per process by gelu_of itself, so every output has the bits gelu_of gives it (all
// 65536 checked). Computed, the loop was compute-bound: 0.52 ns per element on one core at
// x86-64-v4 (the float exponential and division, then rounding to bf16 in integer operations),
// under what memory delivers; looked up, 0.25 ns at v2, v3 and v4 alike.
namespace {
alignas(64) uint16_t g_bf16_gelu[65536];
int g_bf16_gelu_state = 0;  // 0 missing, 1 being made, 2 made

// Whether the table is made; the first block to find it missing makes it (about 35 us at v4)
// while blocks that find it being made compute their own elements.
bool bf16_table_made() {
  int state = __atomic_load_n(&g_bf16_gelu_state, __ATOMIC_ACQUIRE);
  if (state == 2) return true;
  if (state != 0 || !__atomic_compare_exchange_n(&g_bf16_gelu_state, &state, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return false;
  alignas(64) uint16_t bits[1024];
  for (int32_t first = 0; first < 65536; first += 1024) {
    for (int32_t i = 0; i < 1024; ++i) bits[i] = static_cast<uint16_t>(first + i);
    gelu_of(reinterpret_cast<const __bf16*>(bits), reinterpret_cast<__bf16*>(g_bf16_gelu + first), 0, 1024);
  }
  __atomic_store_n(&g_bf16_gelu_state, 2, __ATOMIC_RELEASE);
  return true;
}

typedef uint16_t u16x8 __attribute__((ext_vector_type(8)));

// Eight loads into one vector, stored at once. What Clang makes of a plain loop is slower here:
// an AVX2 or AVX-512 gather (0.37 ns per element on this AMD EPYC: its gathers are slower than
// eight loads) or a store per element (0.39-0.44 ns).
void look_up(const uint16_t* __restrict in, uint16_t* __restrict out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    u16x8 v;
    for (int l = 0; l < 8; ++l) v[l] = g_bf16_gelu[in[i + l]];
    __builtin_memcpy(out + i, &v, sizeof v);
  }
  for (; i < n; ++i) out[i] = g_bf16_gelu[in[i]];
}
}  // namespace

template <>
void gelu<__bf16>(const kiln::cpu::Block& b, const __bf16* __restrict x, __bf16* __restrict y, int64_t n) {
  kiln_ops::Range r = kiln_ops::block_range(b, n);
  if (!bf16_table_made()) return gelu_of(x, y, r.begin, r.end);
  look_up(reinterpret_cast<const uint16_t*>(x) + r.begin, reinterpret_cast<uint16_t*>(y) + r.begin, r.end - r.begin);
}

// In double precision with libm's tanh, rounded to the element type once.
template <class T>
static void gelu_reference_of(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v = static_cast<double>(static_cast<float>(x[i]));
    y[i] = static_cast<T>(static_cast<float>(0.5 * v * (1.0 + __builtin_tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))));
  }
}

void gelu_reference(const float* x, float* y, int64_t n) { gelu_reference_of(x, y, n); }
void gelu_bf16_reference(const __bf16* x, __bf16* y, int64_t n) { gelu_reference_of(x, y, n); }
