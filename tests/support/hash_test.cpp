// Hash128's hex round trip, which manifests and the file memo are written in: every byte value,
// either case, and every malformed string refused.
#include "support/hash.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(HashTest, HexRoundTripsAndTakesEitherCase) {
  Hash128 h;
  for (size_t i = 0; i < 16; ++i) h.bytes[i] = static_cast<uint8_t>(i * 17 + (i == 15 ? 0 : 3));  // 0x03 .. 0xff
  std::string hex = h.hex();
  EXPECT_EQ(Hash128::from_hex(hex), h);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(Hash128::from_hex(upper), h);
  EXPECT_EQ(Hash128::from_hex(xxh3_128("x").hex()), xxh3_128("x"));
}

TEST(HashTest, MalformedHexIsRefused) {
  std::string good = xxh3_128("y").hex();
  EXPECT_FALSE(Hash128::from_hex(good.substr(1)).has_value());
  EXPECT_FALSE(Hash128::from_hex(good + "0").has_value());
  EXPECT_FALSE(Hash128::from_hex("").has_value());
  for (size_t i = 0; i < good.size(); ++i)
    for (char bad : {'g', 'G', ' ', '\0', '/', ':', '@', '`', '\xff'}) {
      std::string s = good;
      s[i] = bad;
      EXPECT_FALSE(Hash128::from_hex(s).has_value()) << i << " " << static_cast<int>(bad);
    }
}

}  // namespace
}  // namespace kiln
