// kiln/philox.h against the known-answer vectors published with Random123 (Salmon et al.,
// SC'11), and the properties kernels rely on: a draw depends only on (seed, offset, index).
#include "kiln/philox.h"

#include <gtest/gtest.h>

#include <set>

namespace kiln {
namespace {

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  struct Case {
    philox::Block counter;
    uint32_t k0, k1;
    philox::Block expected;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (auto& c : cases) {
    auto out = philox::philox4x32_10(c.counter, c.k0, c.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], c.expected.v[i]) << "word " << i;
  }
}

TEST(PhiloxTest, DrawsArePureFunctionsOfSeedOffsetAndIndex) {
  // The 4 values of one block are draws 4k..4k+3; an offset of 1 skips exactly one block.
  auto block = philox::block_at(99, 5);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(philox::draw_u32(99, 5, i), block.v[i]);
  EXPECT_EQ(philox::draw_u32(99, 4, 4), philox::draw_u32(99, 5, 0));
  std::set<uint32_t> distinct;
  for (uint64_t i = 0; i < 4096; ++i) distinct.insert(philox::draw_u32(1, 0, i));
  EXPECT_GT(distinct.size(), 4090u);
  EXPECT_NE(philox::draw_u32(1, 0, 0), philox::draw_u32(2, 0, 0));
  for (uint32_t x : {0u, 1u, 0x7fffffffu, 0xffffffffu}) {
    float f = philox::to_unit_float(x);
    EXPECT_GE(f, 0.0f);
    EXPECT_LT(f, 1.0f);
  }
}

}  // namespace
}  // namespace kiln
