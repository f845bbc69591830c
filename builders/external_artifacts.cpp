// Ops' artifacts made by other compilers (Triton's groups of files, through <kiln/kiln.h>'s
// find_files / store_files): keyed by the caller's kind and key, found in the local store, then
// on the remote tiers, made by one process at a time (single flight, as an op's build), and
// stored with a first-writer-wins option for results that must be the same everywhere.
#include <memory>
#include <string>

#include "builders/ops.h"
#include "cache/artifact_record.h"
#include "cache/cache_key.h"
#include "support/log.h"

namespace kiln::builders {

Hash128 Ops::external_key(std::string_view kind, std::string_view caller_key, std::string* components) {
  // Its own purpose tag: no caller's key can ever name an op's artifact or manifest.
  cache::KeyBuilder key("external", components != nullptr);
  key.add("kind", kind).add("key", caller_key);
  if (components) *components = cache::encode_components(key.components());
  return key.finish();
}

namespace {
// An artifact that owns its bytes, as one read in place.
cache::MappedArtifact owned(cache::Artifact a) {
  auto bytes = std::make_shared<const std::string>(std::move(a.bytes));
  std::string_view view = *bytes;
  return cache::MappedArtifact{std::move(a.record), view, std::move(bytes)};
}
}  // namespace

std::optional<cache::MappedArtifact> Ops::remote_lookup_external(const Hash128& key, cache::RemoteTiers& remote) {
  std::optional<cache::MappedArtifact> got;
  remote.fetch(cache::RemoteObject::kArtifact, key, [&](std::string_view blob) -> Status {
    // Checked as every remote artifact is (its envelope names the key, its signature by a
    // trusted key, its hashes), then that it is an external artifact of `key` (whose kind entered
    // the key: external_key), all in memory; only then kept here. A store that cannot be written
    // (a full disk) still hands over the checked bytes for this process.
    KILN_ASSIGN_OR_RETURN(cache::Artifact a, cache::check_blob_file(key, blob));
    if (!(a.record.input_key == key) || !a.record.manifest.empty())
      return Status(StatusCode::kDataLoss, "the artifact under " + key.hex() + " is not an external " + a.record.kind +
                                               " (it names other inputs or a header manifest)");
    if (Status kept = m_store->import_checked(a.record, blob); !kept.ok())
      KILN_LOG_AT(kWarn, "remote", "a checked " + a.record.kind + " could not be kept here: " + kept.message());
    got = owned(std::move(a));
    return {};
  });
  if (got) {
    KILN_LOG_AT(kInfo, "remote", got->record.kind + " " + got->record.op + ": artifact " + key.hex() + " from a remote tier (" +
                                     std::to_string(got->bytes.size()) + " bytes, checked" + (remote.signing() ? " and signed)" : ")"));
    count_hit(cache::Counter::kHitsRemote, got->record);
  }
  take_remote_counters();
  return got;
}

void Ops::count_disk_hit(cache::CompileCost saved) {
  m_store->count(cache::Counter::kHitsDisk);
  m_store->count(cache::Counter::kCompileWallUsSaved, saved.wall_us);
  m_store->count(cache::Counter::kCompileCpuUsSaved, saved.cpu_us);
}

void Ops::count_hit(cache::Counter tier, const cache::ArtifactRecord& record) {
  m_store->count(tier);
  m_store->count(cache::Counter::kCompileWallUsSaved, static_cast<int64_t>(record.compile_ms * 1000));
  m_store->count(cache::Counter::kCompileCpuUsSaved, static_cast<int64_t>(record.compile_cpu_ms * 1000));
}

void Ops::count_compile(double wall_ms, double cpu_ms) {
  m_store->count(cache::Counter::kCompiles);
  m_store->count(cache::Counter::kCompileWallUsSpent, static_cast<int64_t>(wall_ms * 1000));
  m_store->count(cache::Counter::kCompileCpuUsSpent, static_cast<int64_t>(cpu_ms * 1000));
}

void Ops::take_remote_counters() {
  if (!m_store || !m_remote) return;
  for (auto& c : m_remote->take_counters())
    m_store->count("remote|" + c.tier + "|" + cache::tier_counter_name(c.counter), c.value);
}

Result<std::optional<cache::MappedArtifact>> Ops::local_external(const Hash128& key, CacheOutcome* source) {
  KILN_ASSIGN_OR_RETURN(std::optional<cache::MappedArtifact> hit, m_store->map(key));
  if (hit) {
    if (source) *source = CacheOutcome::kDisk;
    count_hit(cache::Counter::kHitsDisk, hit->record);
  }
  return hit;
}

Result<std::optional<cache::MappedArtifact>> Ops::find_external(const Hash128& key, CacheOutcome* source) {
  if (!m_store) return std::optional<cache::MappedArtifact>();
  KILN_ASSIGN_OR_RETURN(std::optional<cache::MappedArtifact> hit, local_external(key, source));
  if (hit) return hit;
  cache::RemoteTiers* tiers = remote();
  if (!tiers) return std::optional<cache::MappedArtifact>();
  std::optional<cache::MappedArtifact> got = remote_lookup_external(key, *tiers);
  if (got && source) *source = CacheOutcome::kRemote;
  return got;
}

Result<std::optional<cache::MappedArtifact>> Ops::find_or_claim_external(const Hash128& key, const std::string& what, Claim& claim,
                                                                         CacheOutcome* source) {
  KILN_ASSIGN_OR_RETURN(std::optional<cache::MappedArtifact> found, find_external(key, source));
  if (found || !m_store) return found;
  auto look = [&] {
    auto hit = local_external(key, source);
    if (!hit.ok() || !hit->has_value()) return false;
    found = std::move(**hit);
    return true;
  };
  auto look_remote = [&](cache::RemoteTiers& r) {
    found = remote_lookup_external(key, r);
    if (found && source) *source = CacheOutcome::kRemote;
    return found.has_value();
  };
  if (single_flight(key, what, look, look_remote, claim)) {
    claim.lease.reset();
    claim.lock.reset();
    return found;
  }
  m_store->count(cache::Counter::kMisses);
  return std::optional<cache::MappedArtifact>();
}

Result<cache::MappedArtifact> Ops::store_external(cache::ArtifactRecord record, std::string bytes, std::unique_ptr<Claim> claim,
                                                  bool keep_first, bool compiled) {
  if (!m_store) return Status(StatusCode::kUnavailable, "no kiln cache to store " + record.kind + " " + record.op + " in");
  record.input_key = record.key;
  record.manifest.clear();
  if (keep_first) {
    KILN_ASSIGN_OR_RETURN(std::optional<cache::MappedArtifact> first, m_store->map(record.key));
    if (first) return std::move(*first);  // the claim goes with this frame
  }
  KILN_RETURN_IF_ERROR(m_store->put(record, bytes, cache::Compression::kNone));
  if (compiled) count_compile(record.compile_ms, record.compile_cpu_ms);
  std::unique_ptr<cache::RemoteTiers::Lease> lease;
  if (claim) {
    lease = std::move(claim->lease);
    claim.reset();  // this node's waiters find it now
  }
  if (remote()) publish(record.key, record.key, std::move(lease));
  record.size = bytes.size();
  return owned(cache::Artifact{std::move(record), std::move(bytes)});
}

}  // namespace kiln::builders
