// An artifact's record: what the index says about it, and what its blob carries as its
// metadata section, so that a blob describes itself (an index can be rebuilt from blobs alone).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "support/hash.h"
#include "support/status.h"

namespace kiln::cache {

// What the index says about an artifact; the bytes are in the blob.
struct ArtifactRecord {
  Hash128 key;
  Hash128 input_key;         // the inputs before headers; its manifest leads to `key`
  std::string manifest;      // the headers the compile read (opaque: the writer's encoding)
  std::string op;
  std::string target;
  std::string kind;          // "host-so", ..., or "compile-error" for a cached failure
  std::string toolchain;
  std::string entry_points;  // opaque: the writer's encoding
  std::string components;    // opaque: what the key was made of, for `kiln cache explain`
  std::string log;           // compiler output worth keeping
  double compile_ms = 0;      // wall time
  double compile_cpu_ms = 0;  // CPU time of the compiler's threads and child processes (0: not measured)
  uint64_t size = 0;          // raw bytes
  int64_t created = 0;        // unix seconds
  // Filled by reads.
  uint64_t stored_size = 0;  // the blob file
  uint64_t extra_size = 0;   // what else it keeps: the copies of a group's files, its manifest file
  int64_t last_used = 0;
  uint64_t hits = 0;
};

// Whether a manifest leads to the artifact: every compile's, even an empty one (no header read),
// but not a compile error's without one, nor an artifact kept under its caller's key (key ==
// input_key, no manifest: another compiler's, a device's derived code), which is looked up by
// its key alone.
inline bool has_manifest(const ArtifactRecord& r) {
  if (r.input_key == r.key && r.manifest.empty()) return false;
  return !r.manifest.empty() || r.kind != "compile-error";
}

// Binary, length-prefixed; the blob's metadata section (artifact_record.cpp has the format).
std::string encode_record(const ArtifactRecord& r);
Result<ArtifactRecord> decode_record(std::string_view bytes);

struct Artifact {
  ArtifactRecord record;
  std::string bytes;
};

// A whole blob file from elsewhere, checked as a hit checks it and more: both hashes, its
// metadata, and that it is the artifact `key` (a swapped blob is kDataLoss).
Result<Artifact> check_blob_file(const Hash128& key, std::string_view file);

}  // namespace kiln::cache
