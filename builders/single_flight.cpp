// One compile per key across processes and nodes (builders/ops.h): the node's lock, then the
// cluster's lease on the first remote tier that has leases, the remote lookups made while waiting,
// and the publication of what was stored.
#include <chrono>
#include <thread>

#include "builders/ops.h"
#include "builders/remote_lookup.h"
#include "cache/trust.h"
#include "support/file_util.h"
#include "support/log.h"

namespace kiln::builders {

cache::RemoteTiers* Ops::remote() {
  std::call_once(m_remote_once, [this] {
    if (m_tier_configs.empty() || !m_store) return;
    cache::RemoteOptions o;
    o.tiers = m_tier_configs;
    auto seconds = [&](cache::SettingKey k, std::chrono::milliseconds& out) -> Status {
      KILN_ASSIGN_OR_RETURN(double v, m_settings.seconds(k));
      out = std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
      return {};
    };
    Status st = seconds(cache::SettingKey::kConnectTimeout, o.connect_timeout);
    if (st.ok()) st = seconds(cache::SettingKey::kTimeout, o.io_timeout);
    if (st.ok()) st = seconds(cache::SettingKey::kLease, o.lease);
    if (st.ok()) st = seconds(cache::SettingKey::kBreaker, o.breaker);
    if (st.ok()) st = seconds(cache::SettingKey::kWait, m_remote_wait);
    if (st.ok() && o.lease.count() < 300) st = invalid_argument("remote.lease must be at least 0.3 s");
    if (st.ok()) {
      auto trust = cache::trust_from_settings(m_settings);
      if (trust.ok()) o.trust = std::move(trust).value();
      else st = trust.status();
    }
    o.ca_file = m_settings.get(cache::SettingKey::kCaFile);
    o.cert_file = m_settings.get(cache::SettingKey::kCertFile);
    o.key_file = m_settings.get(cache::SettingKey::kKeyFile);
    o.report = [this](const std::string& kind, const std::string& message) { warn_once("remote " + kind, message); };
    // Chunks of a large artifact whose fetch failed part way wait here for the next try.
    o.spool_dir = m_store->root() + "/remote-chunks";
    // Once per process: what trusting these tiers means when no publisher key guards them.
    std::string weakness = st.ok() && m_settings.get(cache::SettingKey::kUnsignedOk) != "1" ? o.trust.weakness() : "";
    if (st.ok()) {
      auto tiers = cache::RemoteTiers::create(std::move(o));
      if (tiers.ok()) m_remote = std::move(tiers).value();
      else st = tiers.status();
    }
    // A remote that cannot be set up must not stop ops from running: say so, compile here.
    if (!st.ok()) warn_once("remote-setup", "remote cache tiers are off: " + st.message());
    else if (!weakness.empty()) warn_once("remote-trust", weakness);
  });
  return m_remote.get();
}

bool Ops::remote_lookup(const OpSpec& spec, const KeyParts& input, BuildOutcome& out, cache::RemoteTiers& remote) {
  // Of the kind this target's compile makes (or a cached failure) and for this target: a cubin
  // under a CPU op's key is refused before it is kept (out.target is the request's, set before
  // any lookup).
  std::optional<RemoteArtifact> got = fetch_through_manifest(remote, *m_store, input, spec, expected_op_artifact(out.target));
  take_remote_counters();
  if (!got) return false;
  out.key = got->artifact.record.key;
  if (!got->fetched) {
    out.cache = CacheOutcome::kDisk;
    return fill_outcome(got->artifact, out);
  }
  KILN_LOG_AT(kInfo, "remote", "op " + spec.name + ": artifact " + out.key.hex() + " from a remote tier (" +
                                   std::to_string(got->artifact.bytes.size()) + " bytes, checked" + (remote.signing() ? " and signed)" : ")"));
  out.cache = CacheOutcome::kRemote;
  if (!fill_outcome(got->artifact, out)) return false;
  count_hit(cache::Counter::kHitsRemote, got->artifact.record);
  return true;
}

bool Ops::wait_for_cluster(const Hash128& key, const std::string& what, const std::function<bool(cache::RemoteTiers&)>& look_remote,
                           cache::RemoteTiers& remote, std::unique_ptr<cache::RemoteTiers::Lease>& lease) {
  if (!remote.has_leases()) return false;
  // Woken when the holder releases its lease (polling only as a fallback): cache/remote_lease.cpp.
  auto waited = remote.wait_for_holder(key, m_remote_wait, [&] { return look_remote(remote); });
  switch (waited.state) {
    case cache::RemoteTiers::WaitState::kFound:
      return true;
    case cache::RemoteTiers::WaitState::kTaken:
      lease = std::move(waited.lease);
      // Whoever held it before may have published and released between our look and now.
      return look_remote(remote);
    case cache::RemoteTiers::WaitState::kTimedOut:
      warn_once("remote-wait", "waited " + std::to_string(m_remote_wait.count() / 1000) + " s for another node compiling " + what +
                                   "; compiling here too");
      return false;
    case cache::RemoteTiers::WaitState::kNone:
      return false;
  }
  return false;
}

bool Ops::single_flight(const Hash128& key, const std::string& what, const std::function<bool()>& look,
                        const std::function<bool(cache::RemoteTiers&)>& look_remote, Claim& claim) {
  if (!m_store) return false;
  // One compile per key across processes: wait for whoever is compiling these inputs, then
  // look again. A waiter that times out compiles itself rather than hang.
  claim.lock.emplace(cache::KeyLock::acquire(m_store->root(), key, m_lock_timeout));
  // Look again under the lock, whether or not we waited: another process may have stored
  // the artifact and released the lock between our first lookup and our taking it.
  if (look()) return true;
  if (!claim.lock->held() && claim.lock->waited())
    warn_once("lock-timeout", "waited too long for another process compiling " + what + "; compiling here too");
  // Then the cluster: a remote tier may have it, or another node may be compiling it now.
  cache::RemoteTiers* tiers = remote();
  return tiers && (look_remote(*tiers) || wait_for_cluster(key, what, look_remote, *tiers, claim.lease));
}

void Ops::publish(const Hash128& key, const Hash128& input_key, std::unique_ptr<cache::RemoteTiers::Lease> lease) {
  // What the local store now holds, byte for byte: the blob file and the manifest.
  auto blob = m_store->read_blob_file(key);
  if (!blob.ok()) return;  // the lease goes with this frame
  std::vector<cache::RemoteTiers::Publication> objects;
  objects.push_back({cache::RemoteObject::kArtifact, key, std::move(blob).value()});
  if (!(input_key == key)) {  // an external artifact has no manifest: its caller's key is its key
    auto manifest = m_store->get_manifest(input_key);
    if (!manifest.ok() || !manifest->has_value()) return;
    objects.push_back({cache::RemoteObject::kManifest, input_key, std::move(**manifest)});
  }
  // Released once both are up: a node waiting on the lease then finds them.
  std::shared_ptr<cache::RemoteTiers::Lease> held(std::move(lease));
  m_remote->publish(std::move(objects), [this, held]() mutable {
    held.reset();
    take_remote_counters();  // ~Ops drains publications before it goes
  });
}

}  // namespace kiln::builders
