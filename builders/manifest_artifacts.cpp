// Compiles another program runs that kiln keys as it keys an op's (kiln cc, launcher/): the
// caller's input key, the manifest of the headers that compile read, and the artifact key the two
// make. The store, the manifests, the single flight and the remote tiers are the ops' own; only
// how a header is labeled, checked and found belongs to the caller (ManifestHeaders).
#include <memory>
#include <string>

#include "builders/ops.h"
#include "cache/cache_key.h"
#include "support/log.h"

namespace kiln::builders {

Result<std::optional<cache::Artifact>> Ops::find_through_manifest_here(const KeyParts& input, const ManifestHeaders& headers,
                                                                       CacheOutcome* source) {
  if (!m_store) return std::optional<cache::Artifact>();
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> text, m_store->get_manifest(input.key));
  if (!text) return std::optional<cache::Artifact>();
  // This store's own manifest (written by a compile here, or checked when it came from a tier):
  // its labels are not checked again, only rehashed.
  auto manifest = decode_manifest(*text);
  if (!manifest.ok()) return std::optional<cache::Artifact>();
  auto current = headers.rehash(*manifest);
  if (!current) {
    KILN_LOG_AT(kDebug, "lookup", headers.what + ": a header of the manifest is gone: a miss");
    return std::optional<cache::Artifact>();
  }
  Hash128 key = artifact_key(input, *current).key;
  KILN_ASSIGN_OR_RETURN(std::optional<cache::Artifact> hit, m_store->get(key));
  if (!hit) {
    KILN_LOG_AT(kDebug, "lookup", headers.what + ": artifact key " + key.hex() + " is not here: a miss");
    return hit;
  }
  if (source) *source = CacheOutcome::kDisk;
  count_hit(cache::Counter::kHitsDisk, hit->record);
  return hit;
}

Result<std::optional<cache::Artifact>> Ops::find_or_claim_through_manifest(const KeyParts& input, const ManifestHeaders& headers,
                                                                           const std::string& kind, Claim& claim,
                                                                           CacheOutcome* source) {
  KILN_ASSIGN_OR_RETURN(std::optional<cache::Artifact> found, find_through_manifest_here(input, headers, source));
  if (found || !m_store) return found;
  auto look = [&] {
    auto hit = find_through_manifest_here(input, headers, source);
    if (!hit.ok() || !hit->has_value()) return false;
    found = std::move(**hit);
    return true;
  };
  auto look_remote = [&](cache::RemoteTiers& tiers) {
    auto got = fetch_through_manifest(tiers, *m_store, input, headers, ExpectedArtifact{{kind}, ""});
    take_remote_counters();
    if (!got) return false;
    KILN_LOG_AT(kInfo, "remote", headers.what + ": " + kind + " " + got->artifact.record.key.hex() + " from a remote tier (" +
                                     std::to_string(got->artifact.bytes.size()) + " bytes, checked)");
    count_hit(got->fetched ? cache::Counter::kHitsRemote : cache::Counter::kHitsDisk, got->artifact.record);
    if (source) *source = got->fetched ? CacheOutcome::kRemote : CacheOutcome::kDisk;
    found = std::move(got->artifact);
    return true;
  };
  if (single_flight(input.key, headers.what, look, look_remote, claim)) {
    claim.lease.reset();
    claim.lock.reset();
    return found;
  }
  m_store->count(cache::Counter::kMisses);
  return std::optional<cache::Artifact>();
}

Status Ops::store_through_manifest(cache::ArtifactRecord record, const KeyParts& input, const std::vector<ManifestEntry>& headers,
                                   std::string_view bytes, std::unique_ptr<Claim> claim) {
  if (!m_store) return Status(StatusCode::kUnavailable, "no kiln cache to store " + record.kind + " " + record.op + " in");
  KeyParts full = artifact_key(input, headers);
  record.key = full.key;
  record.input_key = input.key;
  record.manifest = encode_manifest(headers);
  record.components = cache::encode_components(full.components);
  KILN_RETURN_IF_ERROR(m_store->put(record, bytes));
  count_compile(record.compile_ms, record.compile_cpu_ms);
  std::unique_ptr<cache::RemoteTiers::Lease> lease;
  if (claim) {
    lease = std::move(claim->lease);
    claim.reset();  // this node's waiters find it now
  }
  if (remote()) publish(record.key, input.key, std::move(lease));
  return {};
}

void Ops::count(const std::string& name, int64_t delta) {
  if (m_store) m_store->count(name, delta);
}

}  // namespace kiln::builders
