#include "builders/remote_lookup.h"

#include <string>

#include "support/log.h"

namespace kiln::builders {

std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const OpSpec& spec, std::string_view kind) {
  std::optional<Hash128> key;
  std::string manifest_text;
  remote.fetch(cache::RemoteObject::kManifest, input.key, [&](std::string_view payload) -> Status {
    KILN_ASSIGN_OR_RETURN(auto manifest, decode_manifest(payload));
    if (auto current = rehash_manifest(manifest, spec)) key = artifact_key(input, *current).key;
    else KILN_LOG_AT(kDebug, "remote", spec.name + ": a header of the remote manifest is not here: a miss");
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
    KILN_ASSIGN_OR_RETURN(cache::Artifact a, store.import(*key, blob));
    // The key says so too; a cheap second look.
    if (a.record.input_key != input.key) return Status(StatusCode::kDataLoss, "the artifact was compiled from other inputs");
    if (!kind.empty() && a.record.kind != kind)
      return Status(StatusCode::kDataLoss, "the artifact is a " + a.record.kind + ", not a " + std::string(kind));
    got = RemoteArtifact{std::move(a), true};
    return {};
  });
  return got;
}

}  // namespace kiln::builders
