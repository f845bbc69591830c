// An artifact's record, as a blob's metadata section carries it (artifact_record.h).
#include "cache/artifact_record.h"

#include <cstdlib>
#include <cstring>

#include "cache/blob.h"

namespace kiln::cache {
namespace {

// ---- record encoding: version byte, then u32-length-prefixed fields in a fixed order: the key,
// the input key, manifest, op, target, kind, toolchain, entry points, components, log, compile
// time, size, created (numbers as decimal text).
//
// The compile-time field is the wall time in ms, then, when the CPU time was measured, " cpu=" and
// the CPU time in ms. Version 1 readers (kiln before the CPU time was kept) read the number with
// strtod and stop at the space, so a blob written now still reads there as whole rather than as
// damaged (which would remove it): caches and remote tiers are shared across kiln versions.

constexpr uint8_t k_record_version = 1;
constexpr std::string_view k_cpu_tag = " cpu=";

void put_field(std::string& out, std::string_view v) {
  uint32_t n = static_cast<uint32_t>(v.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>(n >> (8 * i));
  out.append(v);
}

}  // namespace

std::string encode_record(const ArtifactRecord& r) {
  std::string out(1, static_cast<char>(k_record_version));
  put_field(out, std::string_view(reinterpret_cast<const char*>(r.key.bytes.data()), 16));
  put_field(out, std::string_view(reinterpret_cast<const char*>(r.input_key.bytes.data()), 16));
  for (const std::string* f : {&r.manifest, &r.op, &r.target, &r.kind, &r.toolchain, &r.entry_points, &r.components, &r.log})
    put_field(out, *f);
  std::string ms = std::to_string(r.compile_ms);
  if (r.compile_cpu_ms > 0) ms += std::string(k_cpu_tag) + std::to_string(r.compile_cpu_ms);
  put_field(out, ms);
  put_field(out, std::to_string(r.size));
  put_field(out, std::to_string(r.created));
  return out;
}

Result<ArtifactRecord> decode_record(std::string_view in) {
  auto bad = [](const std::string& what) { return Status(StatusCode::kDataLoss, "bad artifact metadata: " + what); };
  if (in.empty() || static_cast<uint8_t>(in[0]) != k_record_version) return bad("unknown version");
  size_t pos = 1;
  auto next = [&](std::string_view& out) -> bool {
    if (in.size() - pos < 4) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
    pos += 4;
    if (in.size() - pos < n) return false;
    out = in.substr(pos, n);
    pos += n;
    return true;
  };
  ArtifactRecord r;
  std::string_view key, input;
  if (!next(key) || !next(input) || key.size() != 16 || input.size() != 16) return bad("keys");
  std::memcpy(r.key.bytes.data(), key.data(), 16);
  std::memcpy(r.input_key.bytes.data(), input.data(), 16);
  for (std::string* f : {&r.manifest, &r.op, &r.target, &r.kind, &r.toolchain, &r.entry_points, &r.components, &r.log}) {
    std::string_view v;
    if (!next(v)) return bad("truncated");
    f->assign(v);
  }
  std::string_view ms, size, created;
  if (!next(ms) || !next(size) || !next(created) || pos != in.size()) return bad("truncated numbers");
  char* end = nullptr;
  std::string tmp(ms);
  r.compile_ms = std::strtod(tmp.c_str(), &end);
  if (size_t cpu = tmp.find(k_cpu_tag); cpu != std::string::npos) r.compile_cpu_ms = std::strtod(tmp.c_str() + cpu + k_cpu_tag.size(), &end);
  tmp.assign(size);
  r.size = std::strtoull(tmp.c_str(), &end, 10);
  tmp.assign(created);
  r.created = std::strtoll(tmp.c_str(), &end, 10);
  if (r.op.empty() || r.kind.empty()) return bad("no op or kind");
  return r;
}

Result<Artifact> check_blob_file(const Hash128& key, std::string_view file) {
  KILN_ASSIGN_OR_RETURN(DecodedBlob decoded, decode_blob(file, /*with_metadata=*/true));
  KILN_ASSIGN_OR_RETURN(ArtifactRecord record, decode_record(decoded.metadata));
  if (record.key != key) return Status(StatusCode::kDataLoss, "the blob holds artifact " + record.key.hex() + ", not " + key.hex());
  if (record.size != decoded.content.size()) return Status(StatusCode::kDataLoss, "the blob's metadata disagrees with its size");
  return Artifact{std::move(record), std::move(decoded.content)};
}

}  // namespace kiln::cache
