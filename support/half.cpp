#include "support/half.h"

#include <bit>
#include <cmath>

namespace kiln {

uint16_t float_to_half_bits(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;   // NaN stays a (quiet) NaN
  if (abs >= 0x47800000) return sign | 0x7c00;  // 65536 and up (and infinity): infinity
  int exponent = static_cast<int>(abs >> 23) - 127;
  uint32_t mantissa = abs & 0x7fffff;
  uint32_t half, rest, halfway;
  if (exponent >= -14) {
    // A normal half: 10 of the 23 mantissa bits stay; rounding may carry into the exponent,
    // up to infinity (65520 and up), which is what rounding to nearest asks for.
    half = (static_cast<uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    rest = mantissa & 0x1fff;
    halfway = 0x1000;
  } else {
    if (exponent < -25) return sign;  // under half the smallest subnormal (2^-25): zero
    // A subnormal half counts units of 2^-24: the value (1.m x 2^e) is (1m) >> (-e - 1) units.
    uint32_t full = mantissa | 0x800000;
    int shift = -exponent - 1;  // 14..24
    half = full >> shift;
    rest = full & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  if (rest > halfway || (rest == halfway && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float half_bits_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mantissa << 13));
  if (exponent == 0) {
    float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_bfloat16_bits(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  // The upper 16 bits, rounded to nearest even on the lower 16.
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bfloat16_bits_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace kiln
