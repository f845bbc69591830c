// `kiln cache unpack` reads files from elsewhere: any bytes are refused with kDataLoss (or
// imported when they are a whole, valid bundle), never a crash or a read out of bounds. The
// mutated input's hashes (of the index and of each object) are recomputed first, so that
// mutations get past them and reach the index, envelope and blob checks behind.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "cache/bundle.h"
#include "support/little_endian.h"

namespace {

// The hash at `at`, rewritten in place.
void set_hash(std::string& s, size_t at, const kiln::Hash128& h) { std::memcpy(&s[at], h.bytes.data(), h.bytes.size()); }

// Rewrites each object's hash in the index, then the index's hash, wherever the (mutated)
// layout still lets them be found.
void fix_hashes(std::string& s) {
  constexpr size_t header = 48;
  if (s.size() < header) return;
  uint64_t count = kiln::get_le(s, 16, 8), index_size = kiln::get_le(s, 24, 8);
  if (index_size > s.size() - header) return;
  size_t pos = header, end = header + index_size, offset = end;
  for (uint64_t i = 0; i < count && end - pos >= 43; ++i) {
    uint64_t size = kiln::get_le(s, pos + 17, 8);
    size_t label = kiln::get_le(s, pos + 41, 2);
    if (size > s.size() - offset) break;
    set_hash(s, pos + 25, kiln::xxh3_128(std::string_view(s).substr(offset, size)));
    offset += size;
    pos += 43;
    if (end - pos < label) break;
    pos += label;
  }
  set_hash(s, 32, kiln::xxh3_128(std::string_view(s).substr(header, index_size)));
}

// A folder of its own for the store and the input file, removed at exit.
const std::string& work_dir() {
  static const std::string dir = [] {
    char templ[] = "/tmp/kiln-bundle-fuzz-XXXXXX";
    return std::string(::mkdtemp(templ));
  }();
  // Registered once `dir` is made, so it runs before `dir` is destroyed.
  static const bool cleanup = (std::atexit([] { std::filesystem::remove_all(dir); }), true);
  (void)cleanup;
  return dir;
}

kiln::cache::Store& store() {
  static auto s = kiln::cache::Store::open(work_dir() + "/cache").value();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() >= 48 && (bytes[47] & 1)) fix_hashes(bytes);  // half the time: hashes as mutated
  static const std::string path = work_dir() + "/input.kpack";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto report = kiln::cache::unpack_bundle(store(), path, kiln::cache::TrustConfig{});
  if (!report.ok() && report.status().code() != kiln::StatusCode::kDataLoss) __builtin_trap();
  return 0;
}
