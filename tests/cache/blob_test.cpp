#include "cache/blob.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln::cache {
namespace {

std::string compressible(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>("kernel"[i % 6]);
  return s;
}

std::string random_bytes(size_t n) {
  std::mt19937 rng(7);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(BlobTest, RoundTripsCompressibleAndIncompressibleContent) {
  for (const std::string& content : {compressible(100000), random_bytes(5000), std::string()}) {
    EncodedBlob blob = encode_blob(content, "metadata of " + std::to_string(content.size()));
    auto back = decode_blob(blob.bytes);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->content, content);
    EXPECT_EQ(back->metadata, "metadata of " + std::to_string(content.size()));
  }
  EXPECT_LT(encode_blob(compressible(100000)).bytes.size(), 10000u);  // zstd was used
  EXPECT_EQ(encode_blob(random_bytes(5000)).bytes.size(), k_blob_header_size + 5000);  // stored as is
  EncodedBlob stored = encode_blob(compressible(100000), "", Compression::kNone);  // asked to keep it as is
  EXPECT_EQ(stored.bytes.size(), k_blob_header_size + 100000);
  EXPECT_EQ(decode_blob(stored.bytes)->content, compressible(100000));
}

// A section under 4 KiB is kept as it is (one disk block either way; decoding would need a zstd
// context, whose creation runs CPUID); from 4 KiB on, one that compresses is compressed.
TEST(BlobTest, SmallSectionsAreKeptAsTheyAre) {
  EncodedBlob small = encode_blob(compressible(4095), std::string(4095, 'm'));
  EXPECT_GT(small.bytes.size(), 2 * 4095u);
  EncodedBlob large = encode_blob(compressible(4096), std::string(4096, 'm'));
  EXPECT_LT(large.bytes.size(), 4096u);
  for (auto* b : {&small, &large}) {
    auto back = decode_blob(b->bytes);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->content.size(), b == &small ? 4095u : 4096u);
  }
}

TEST(BlobTest, EveryTruncationIsDataLoss) {
  EncodedBlob blob = encode_blob(compressible(6000), std::string(5000, 'm'));
  for (size_t len = 0; len < blob.bytes.size(); len += 7) {
    auto r = decode_blob(std::string_view(blob.bytes).substr(0, len));
    ASSERT_FALSE(r.ok()) << "length " << len;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
}

TEST(BlobTest, EveryFlippedByteIsDetected) {
  // Compressed sections (from 4 KiB) and raw ones.
  for (const std::string& content : {compressible(5000), random_bytes(700)}) {
    EncodedBlob blob = encode_blob(content, content.size() > 1000 ? std::string(4500, 'm') : "some metadata");
    for (size_t i = 0; i < blob.bytes.size(); ++i) {
      std::string damaged = blob.bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ 0x20);
      auto r = decode_blob(damaged);
      EXPECT_FALSE(r.ok()) << "a flip at byte " << i << " decoded as valid";
    }
  }
}

}  // namespace
}  // namespace kiln::cache
