// What the tests of remote tiers at scale share (remote_cluster_test.cpp, remote_s3_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "cache/remote.h"

namespace kiln::cache {

// `n` bytes that compress badly, the same for the same seed.
inline std::string noise(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : out) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  return out;
}

// The artifact under `key` as `accept` was handed it, or "" when no tier had it whole and checked;
// `accepted` counts the calls of accept.
inline std::string fetch_whole(RemoteTiers& t, const Hash128& key, int* accepted = nullptr) {
  std::string got;
  bool found = t.fetch(RemoteObject::kArtifact, key, [&](std::string_view p) {
    got = std::string(p);
    if (accepted) ++*accepted;
    return Status();
  });
  return found ? got : "";
}

// The tiers' counters since the last call, summed over tiers.
inline std::map<TierCounter, int64_t> counters_of(RemoteTiers& t) {
  std::map<TierCounter, int64_t> by;
  for (auto& v : t.take_counters()) by[v.counter] += v.value;
  return by;
}

}  // namespace kiln::cache
