// Half and bfloat16 conversions against the compiler's own _Float16 (round to nearest even).
#include "support/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

namespace kiln {
namespace {

TEST(HalfTest, EveryHalfSurvivesARoundTripThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float f = half_bits_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(f))));
      continue;
    }
    EXPECT_EQ(float_to_half_bits(f), bits) << std::hex << bits;
  }
}

TEST(HalfTest, RoundingMatchesTheCompilersFloat16) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1'000'000; ++i) {
    // Floats of every magnitude a half can hold or round to, and beyond.
    float f = std::bit_cast<float>(any(rng) & 0xc7ffffffu);
    _Float16 reference = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &reference, 2);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half_bits(f), want) << f;
  }
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7bff);  // 65504, the largest half
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);  // a tie, to even: zero
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.5f, -25)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
}

TEST(HalfTest, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16_bits_to_float(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1).
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // up, to even
  EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(float_to_bfloat16_bits(NAN))));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float f = bfloat16_bits_to_float(static_cast<uint16_t>(bits));
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bfloat16_bits(f), bits);
    }
  }
}

}  // namespace
}  // namespace kiln
