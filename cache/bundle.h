// Bundles: a warmed cache (or part of it) as one portable file, to ship to machines that
// have the same toolchains (an image build, an air-gapped cluster).
//
// A bundle holds the objects a remote tier would hold (remote.h): each artifact's blob file,
// byte for byte as the store keeps it (self-describing and zstd-compressed inside), and the
// header manifest of its input key, so direct lookups hit after an unpack. Each travels in the
// remote envelope (namespace "bundle"), signed with the node's publisher key (Ed25519), else
// with HMAC-SHA256 when only a cluster secret is configured.
//
//   offset  size  field
//   0       8     magic "KILNPACK"
//   8       4     format version (1), little-endian
//   12      4     flags: 1 = the objects are signed
//   16      8     number of objects
//   24      8     size of the index
//   32      16    XXH3-128 of the index
//   48      ...   the index: per object its type ('a' or 'm'), key (16), size (8), XXH3-128 of
//                 its envelope (16), and a label ("op for target", 2-byte length first);
//                 then the envelopes, in index order, back to back
//
// Unpacking checks everything before it imports anything: the header, the index's hash, that
// every object lies within the file, each object's hash, its envelope (its key; its signature
// by a trusted key, or its tag under a secret), and for artifacts every check of a hit (both of the blob's
// hashes, its metadata naming the key). A bundle that fails any check is refused whole, naming
// the object that failed.
#pragma once

#include <string>
#include <vector>

#include "cache/store.h"
#include "cache/trust.h"
#include "support/status.h"

namespace kiln::cache {

struct PackFilter {
  std::vector<std::string> ops;      // empty: every op (precompiled headers included)
  std::vector<std::string> targets;  // empty: every target
};

struct PackReport {
  uint64_t artifacts = 0, manifests = 0, bytes = 0;
  bool signed_objects = false;
};

// Writes the bundle to `path` (a temporary file renamed into place), signed as `trust` signs
// remote objects; kPermissionDenied for a reader (keys trusted, none held).
Result<PackReport> pack_bundle(Store& store, const std::string& path, const PackFilter& filter, const TrustConfig& trust);

struct UnpackReport {
  uint64_t artifacts = 0, manifests = 0, already_here = 0, bytes = 0;
  bool signed_objects = false;
};

// Checks the whole bundle, then imports it. Under keys, every object must be signed by a
// trusted key; under a secret, carry its tag. kDataLoss names the first object that failed; nothing is imported then.
Result<UnpackReport> unpack_bundle(Store& store, const std::string& path, const TrustConfig& trust);

}  // namespace kiln::cache
