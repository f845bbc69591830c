// An artifact record as the store's tests make them: a host-so of op `name` with a manifest.
#pragma once

#include <string>

#include "cache/artifact_record.h"

namespace kiln::cache::testing_records {

inline ArtifactRecord record_for(const std::string& name) {
  ArtifactRecord r;
  r.key = xxh3_128(name);
  r.input_key = xxh3_128("input of " + name);
  r.manifest = "spec:h.h\t00112233445566778899aabbccddeeff\n";
  r.op = name;
  r.target = "cpu:x86-64-v3";
  r.kind = "host-so";
  r.toolchain = "test";
  r.entry_points = name + ":8";
  r.components = "target\tcpu:x86-64-v3\n";
  r.compile_ms = 12.5;
  return r;
}

}  // namespace kiln::cache::testing_records
