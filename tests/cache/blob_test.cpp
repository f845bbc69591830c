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

TEST(BlobTest, EveryTruncationIsDataLoss) {
  EncodedBlob blob = encode_blob(compressible(3000), "meta");
  for (size_t len = 0; len < blob.bytes.size(); len += 7) {
    auto r = decode_blob(std::string_view(blob.bytes).substr(0, len));
    ASSERT_FALSE(r.ok()) << "length " << len;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
}

TEST(BlobTest, EveryFlippedByteIsDetected) {
  for (const std::string& content : {compressible(2000), random_bytes(700)}) {
    EncodedBlob blob = encode_blob(content, "some metadata");
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
