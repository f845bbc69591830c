// Float math for CPU kernels written from plain arithmetic, so that Clang turns a loop over it
// into SIMD code (a call into libm would keep the loop scalar). Relative error a few float ulps
// (exp: < 2e-7 by the bound of its series; tanh: < 3e-7 away from 0, < 1e-7 absolute near it).
#pragma once

#include <kiln/cpu_kernel.h>

namespace kiln_ops {

// e^x: x = k ln2 + r with |r| <= ln2/2 (ln2 in two parts, so k ln2 is exact enough), e^r by its
// Taylor series to r^7 (the next term is under 5.2e-9 of it), 2^k by its exponent bits.
// k is rounded by adding 1.5 * 2^23 (float addition rounds to nearest even, as rintf does),
// which also leaves k + 127 in the sum's low bits, so 2^k is one shift of them: 15 vector
// instructions where rintf, a conversion and an add took 18 (callgrind, gelu and softmax_online).
// Over every 8th float in [-87, 88] its largest relative error is 7.8e-8, and it differs from
// the rintf form for 4 inputs in 2.2e9.
inline float exp_approx(float x) {
  x = x < -87.3f ? -87.3f : x;  // e^x stays a normal float; two compares, so a NaN stays a NaN
  x = x > 88.3f ? 88.3f : x;
  constexpr float k_shifter = 12582912.f + 127.f;  // 1.5 * 2^23, plus the exponent's bias
  float shifted = x * 1.44269504088896341f + k_shifter;
  float k = shifted - k_shifter;
  float r = (x - k * 0.693145751953125f) - k * 1.42860682030941723e-6f;
  float p = 1.f + r * (1.f + r * (0.5f + r * (1.f / 6 + r * (1.f / 24 + r * (1.f / 120 + r * (1.f / 720 + r * (1.f / 5040)))))));
  return p * __builtin_bit_cast(float, __builtin_bit_cast(int32_t, shifted) << 23);
}

// tanh(x) = 1 - 2 / (e^2x + 1): exact limits at both ends, the absolute error of exp near 0.
inline float tanh_approx(float x) { return 1.f - 2.f / (exp_approx(2.f * x) + 1.f); }

// float to bfloat16, rounding to nearest even, NaN kept a NaN: the same result as the
// conversion Clang emits, without its call into the compiler runtime (CPUs before AVX512-BF16
// have no instruction for it), so a loop of them vectorises.
// The choice is made on 32-bit lanes and narrowed once (choosing between two narrowed values
// made Clang narrow each: two AVX-512 vpmovdw per 16 elements, the costliest step of
// gelu_bf16's loop).
inline __bf16 to_bfloat16(float x) {
  uint32_t bits = __builtin_bit_cast(uint32_t, x);
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  uint32_t out = (bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x40u : rounded;
  return __builtin_bit_cast(__bf16, static_cast<uint16_t>(out));
}
inline float to_float(__bf16 x) { return __builtin_bit_cast(float, static_cast<uint32_t>(__builtin_bit_cast(uint16_t, x)) << 16); }
inline float to_float(float x) { return x; }
inline __bf16 from_float(float x, const __bf16*) { return to_bfloat16(x); }
inline float from_float(float x, const float*) { return x; }

}  // namespace kiln_ops
