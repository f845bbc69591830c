// How an artifact keyed through a manifest is found on the remote tiers: the one sequence that
// an op's build (Ops) and a precompiled header (PrecompiledHeaders) both follow.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "builders/op_builder.h"
#include "cache/remote.h"
#include "cache/store.h"

namespace kiln::builders {

struct RemoteArtifact {
  cache::Artifact artifact;
  bool fetched = false;  // false: it was in this store already, reached from other inputs
};

// What the artifact must be, besides the one `input` and its headers lead to.
struct ExpectedArtifact {
  std::vector<std::string> kinds;  // its kind is one of these ("host-so", "compile-error"); never empty
  std::string target;              // its record's target ("cpu:x86-64-v3"); empty: any
};

// The kinds an op's artifact for `target` may be: what the target's toolchain makes
// (artifact_kind_for) or a cached compile error.
ExpectedArtifact expected_op_artifact(const std::string& target);

// How the headers a manifest names are found and checked here: an op's through its spec (the
// overloads below), a launcher's compile (kiln cc) through its own labels.
struct ManifestHeaders {
  std::string what;  // names the compile in messages ("op gelu", "norm.cu")
  // Before any header it names is read: kDataLoss when a label is not one this compile may read.
  std::function<Status(const std::vector<ManifestEntry>&)> check;
  // The headers' current content hashes, in order; nullopt when one is gone (a miss).
  std::function<std::optional<std::vector<ManifestEntry>>(const std::vector<ManifestEntry>&)> rehash;
};
ManifestHeaders spec_manifest_headers(const OpSpec& spec);

// The artifact of `input` from the remote tiers: its manifest fetched, its labels checked
// (check_manifest_headers: nothing outside the folders the compile reads, no device or FIFO, no
// header past the cap) and rehashed here (a header that differs here, another torch or another
// libstdc++, is a miss), then the artifact it leads to taken from `store` when it is here already
// (the manifest, the only thing missing, is written), else fetched and checked whole in memory
// first: the envelope and signature (the tiers), the blob's hashes and metadata, that it is the
// artifact of that key, made from `input` with those headers, of one of the expected kinds and
// for the expected target. Only then is it imported into `store`: a refused artifact is never
// kept. nullopt: a miss (what went wrong is logged by the tiers, at debug level here).
std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const OpSpec& spec, const ExpectedArtifact& expected);
std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const ManifestHeaders& headers, const ExpectedArtifact& expected);
// The same for one kind, of any target (a precompiled header: "pch").
std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const OpSpec& spec, std::string_view kind);

// Ok when `record`, the checked blob of `key`'s metadata, is an artifact this lookup may keep:
// made from `input` with the headers `current` (as rehashed here), of an expected kind and target.
// kDataLoss saying which check failed.
Status check_remote_record(const cache::ArtifactRecord& record, const KeyParts& input, const std::vector<ManifestEntry>& current,
                           const ExpectedArtifact& expected);

}  // namespace kiln::builders
