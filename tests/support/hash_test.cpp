// Hash128's hex round trip, which manifests and the file memo are written in: every byte value,
// either case, and every malformed string refused. XXH3-128 gives the same hash by every path: in
// one call or streamed, inputs long enough for the AVX2 build (hash_avx2.cpp, where the CPU has
// it) or fed in pieces short enough for the baseline one, and XXH3's published value for "".
#include "support/hash.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

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

TEST(HashTest, Xxh3GivesTheSameHashByEveryPath) {
  // XXH3-128 of no bytes (xxHash's test vectors): 99aa06d3014798d86001c324468d497f.
  EXPECT_EQ(xxh3_128("", 0).hex(), "99aa06d3014798d86001c324468d497f");
  std::string data(3 << 20, '\0');
  std::mt19937_64 rng(11);
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t size : {1ul, 16ul, 128ul, 240ul, 241ul, 1000ul, 1024ul, 65536ul, 1ul << 20, (1ul << 20) + 17, 3ul << 20}) {
    Hash128 whole = xxh3_128(data.data(), size);
    Hasher128 one;  // one update: the AVX2 build for 241 bytes and more
    one.update(data.data(), size);
    Hasher128 pieces;  // 200 bytes at a time: the baseline build
    for (size_t at = 0; at < size; at += 200) pieces.update(data.data() + at, std::min<size_t>(200, size - at));
    EXPECT_EQ(one.digest(), whole) << size;
    EXPECT_EQ(pieces.digest(), whole) << size;
  }
}

}  // namespace
}  // namespace kiln
