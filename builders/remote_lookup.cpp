#include "builders/remote_lookup.h"

#include <algorithm>
#include <string>

#include "builders/target.h"
#include "support/log.h"

namespace kiln::builders {

ExpectedArtifact expected_op_artifact(const std::string& target) {
  ExpectedArtifact out;
  auto parsed = parse_target(target);
  // A target that does not parse expects nothing that can pass: an empty kind is never stored.
  out.kinds = {parsed.ok() ? artifact_kind_for(parsed.value()) : std::string(), "compile-error"};
  out.target = target;
  return out;
}

Status check_remote_record(const cache::ArtifactRecord& record, const KeyParts& input, const std::vector<ManifestEntry>& current,
                           const ExpectedArtifact& expected) {
  auto refuse = [](const std::string& why) { return Status(StatusCode::kDataLoss, why); };
  // The key says so too; a cheap second look.
  if (record.input_key != input.key) return refuse("the artifact was compiled from other inputs");
  if (std::find(expected.kinds.begin(), expected.kinds.end(), record.kind) == expected.kinds.end()) {
    std::string kinds;
    for (auto& k : expected.kinds) kinds += (kinds.empty() ? "" : " or ") + k;
    return refuse("the artifact is a " + record.kind + ", not a " + kinds);
  }
  if (!expected.target.empty() && record.target != expected.target)
    return refuse("the artifact is for " + record.target + ", not " + expected.target);
  // Its manifest becomes this store's for `input`: it must be the headers that led here.
  auto manifest = decode_manifest(record.manifest);
  if (!manifest.ok()) return refuse("the artifact's manifest: " + manifest.status().message());
  bool same = manifest->size() == current.size();
  for (size_t i = 0; same && i < current.size(); ++i)
    same = (*manifest)[i].label == current[i].label && (*manifest)[i].hash == current[i].hash;
  if (!same) return refuse("the artifact's manifest is not the one that leads to it");
  return {};
}

std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const OpSpec& spec, std::string_view kind) {
  return fetch_through_manifest(remote, store, input, spec, ExpectedArtifact{{std::string(kind)}, ""});
}

ManifestHeaders spec_manifest_headers(const OpSpec& spec) {
  return ManifestHeaders{spec.name, [&spec](const std::vector<ManifestEntry>& m) { return check_manifest_headers(m, spec); },
                         [&spec](const std::vector<ManifestEntry>& m) { return rehash_manifest(m, spec); }};
}

std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const OpSpec& spec, const ExpectedArtifact& expected) {
  return fetch_through_manifest(remote, store, input, spec_manifest_headers(spec), expected);
}

std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const ManifestHeaders& headers, const ExpectedArtifact& expected) {
  std::optional<Hash128> key;
  std::vector<ManifestEntry> current;
  std::string manifest_text;
  remote.fetch(cache::RemoteObject::kManifest, input.key, [&](std::string_view payload) -> Status {
    KILN_ASSIGN_OR_RETURN(auto manifest, decode_manifest(payload));
    // Before any header it names is read: refused, like a tampered object, when it names what
    // kiln never writes (a device, a file outside the folders the compile reads).
    KILN_RETURN_IF_ERROR(headers.check(manifest));
    if (auto rehashed = headers.rehash(manifest)) {
      key = artifact_key(input, *rehashed).key;
      current = std::move(*rehashed);
    } else {
      KILN_LOG_AT(kDebug, "remote", headers.what + ": a header of the remote manifest is not here: a miss");
    }
    manifest_text = payload;
    return {};
  });
  if (!key) return std::nullopt;
  if (auto here = store.get(*key); here.ok() && here->has_value()) {
    // A manifest that cannot be written (a full disk) costs the next process this fetch again.
    (void)store.put_manifest(input.key, manifest_text);
    return RemoteArtifact{std::move(**here), false};
  }
  std::optional<RemoteArtifact> got;
  remote.fetch(cache::RemoteObject::kArtifact, *key, [&](std::string_view blob) -> Status {
    // Decoded and checked in memory: its hashes, its metadata, that it is the artifact `key`.
    KILN_ASSIGN_OR_RETURN(cache::Artifact a, cache::check_blob_file(*key, blob));
    KILN_RETURN_IF_ERROR(check_remote_record(a.record, input, current, expected));
    // Only now kept. A store that cannot be written still serves this process from memory.
    if (Status kept = store.import_checked(a.record, blob); !kept.ok())
      KILN_LOG_AT(kDebug, "remote", headers.what + ": artifact " + key->hex() + " checked but not kept here: " + kept.message());
    got = RemoteArtifact{std::move(a), true};
    return {};
  });
  return got;
}

}  // namespace kiln::builders
