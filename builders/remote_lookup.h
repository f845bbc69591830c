// How an artifact keyed through a manifest is found on the remote tiers: the one sequence that
// an op's build (Ops) and a precompiled header (PrecompiledHeaders) both follow.
#pragma once

#include <optional>
#include <string_view>

#include "builders/op_builder.h"
#include "cache/remote.h"
#include "cache/store.h"

namespace kiln::builders {

struct RemoteArtifact {
  cache::Artifact artifact;
  bool fetched = false;  // false: it was in this store already, reached from other inputs
};

// The artifact of `input` from the remote tiers: its manifest fetched and rehashed here (a
// header that differs here, another torch or another libstdc++, is a miss), then the artifact
// it leads to taken from `store` when it is here already (the manifest, the only thing missing,
// is written), else fetched, checked as every remote object is (envelope, signature when the
// cluster signs, hashes), imported with its manifest, and refused unless it was made from
// `input` and, when `kind` is not empty, is of that kind. nullopt: a miss (what went wrong is
// logged by the tiers, at debug level here).
std::optional<RemoteArtifact> fetch_through_manifest(cache::RemoteTiers& remote, cache::Store& store, const KeyParts& input,
                                                     const OpSpec& spec, std::string_view kind = {});

}  // namespace kiln::builders
