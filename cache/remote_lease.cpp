// Leases: one compile per key across the cluster. The lease lives beside the manifest it
// waits for (the manifest's owner, or the next endpoint while that one is down), as a key set
// only if absent with a time to live that the server, not the holder, counts down: a holder
// whose clock is skewed or jumps cannot make a lease last longer or end sooner.
//
// Waiting costs the tier O(1) per interval, whatever the number of waiters: each waiter
// watches the lease (Redis: SUBSCRIBE on the lease's channel, which the holder's release
// PUBLISHes to) and sleeps on that socket; it polls only as a fallback for a holder that died
// without releasing (its lease then expires on the server), spacing its polls by the number
// of watchers so that all of them together poll about lease_polls_per_second times a second.
// Where the store cannot wake waiters (HTTP), they poll as before (20 ms growing to 0.5 s).
//
// A node that publishes nothing to a tier (a reader: keys trusted and none held, or a tier whose
// server refused this node's writes, lease or object) never holds a lease there: the nodes that
// waited on it would wait for a compile that is never published. It still waits for a holder
// that can publish, watching and looking without writing (EXISTS), so a reader's ACL needs no
// write to the lease keyspace; where no one holds the lease, it compiles at once.
#include <unistd.h>

#include <algorithm>
#include <random>

#include "cache/remote.h"
#include "support/log.h"

namespace kiln::cache {
namespace {

using Clock = std::chrono::steady_clock;

// Who holds a lease: unique per process and lease, readable in `redis-cli GET`.
std::string lease_holder() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 random{std::random_device{}()};
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + std::to_string(counter.fetch_add(1)) + ":" +
         std::to_string(random() % 1000000);
}

std::string lease_name(const Hash128& input_key) { return "lease:" + input_key.hex(); }

// Polling without a watch: the first look soon (most compiles are short), then less often.
constexpr auto k_first_pause = std::chrono::milliseconds(20);
constexpr auto k_longest_pause = std::chrono::milliseconds(500);
// With a watch, no waiter polls more than once a second, however few they are.
constexpr auto k_shortest_watched_poll = std::chrono::milliseconds(1000);

}  // namespace

bool RemoteTiers::has_leases() const {
  for (auto& t : m_tiers)
    if (!t->config.read_only && t->endpoints.front()->remote->has_leases()) return true;
  return false;
}

RemoteTiers::LeaseResult RemoteTiers::take_lease_on(Tier& tier, const Hash128& input_key) {
  LeaseResult out;
  std::string name = lease_name(input_key), holder = lease_holder();
  Endpoint* used = nullptr;
  auto taken = with_failover(tier, object_name(RemoteObject::kManifest, input_key),
                             [&](RemoteEndpoint& e) { return e.take_lease(name, holder, m_options.lease); }, &used);
  if (!taken.ok()) {
    // Refused (a reader's credentials): said once, and this node holds no more leases there.
    if (taken.status().code() == StatusCode::kPermissionDenied) deny(tier, taken.status());
    return out;  // no answer: compile without waiting for anyone
  }
  if (!taken.value()) {
    out.state = LeaseState::kHeldElsewhere;
    return out;
  }
  out.state = LeaseState::kTaken;
  out.lease.reset(new Lease);
  Lease& lease = *out.lease;
  lease.m_endpoint = used->remote;
  lease.m_name = name;
  lease.m_holder = holder;
  lease.m_ttl = m_options.lease;
  lease.m_renewer = std::thread([&lease] {
    std::unique_lock lock(lease.m_mutex);
    while (!lease.m_wake.wait_for(lock, lease.m_ttl / 3, [&] { return lease.m_stop; })) {
      auto renewed = lease.m_endpoint->renew_lease(lease.m_name, lease.m_holder, lease.m_ttl);
      if (renewed.ok() && !renewed.value()) KILN_LOG_AT(kWarn, "remote", "lost the lease " + lease.m_name + " (it expired)");
    }
  });
  KILN_LOG_AT(kDebug, "remote", "took the lease " + name + " on " + used->remote->label());
  return out;
}

RemoteTiers::LeaseResult RemoteTiers::take_lease(const Hash128& input_key) {
  for (auto& tier : m_tiers) {
    if (tier->config.read_only || !tier->endpoints.front()->remote->has_leases()) continue;
    if (tier->denied.load() || !m_options.trust.can_publish()) return {};  // a reader holds none
    return take_lease_on(*tier, input_key);
  }
  return {};
}

RemoteTiers::WaitResult RemoteTiers::wait_for_holder(const Hash128& input_key, std::chrono::milliseconds max_wait,
                                                     const std::function<bool()>& look) {
  WaitResult out;
  Tier* tier = nullptr;
  for (auto& t : m_tiers)
    if (!tier && !t->config.read_only && t->endpoints.front()->remote->has_leases()) tier = t.get();
  if (!tier) return out;
  std::string manifest = object_name(RemoteObject::kManifest, input_key), name = lease_name(input_key);
  auto deadline = Clock::now() + max_wait;
  std::unique_ptr<RemoteEndpoint::LeaseWatch> watch;
  Endpoint* watched = nullptr;
  auto pause = std::chrono::milliseconds(k_first_pause);
  thread_local std::mt19937_64 random{std::random_device{}()};
  bool said = false;
  for (;;) {
    // Watch first, then try the lease: a release that comes between the two still wakes us.
    Endpoint& home = owner(*tier, manifest);
    if (watched != &home && m_options.watch_leases) {
      watched = &home;
      watch.reset();
      // Through the breaker: a silent server costs one timeout, not one per wait.
      auto w = with_failover(*tier, std::vector<Endpoint*>{&home}, [&](RemoteEndpoint& e) -> Result<bool> {
        KILN_ASSIGN_OR_RETURN(watch, e.watch_lease(name));
        return true;
      });
      ++out.polls;
      if (!w.ok()) watch.reset();
    }
    LeaseResult taken;
    if (!tier->denied.load() && m_options.trust.can_publish()) {
      taken = take_lease_on(*tier, input_key);
    } else {  // a reader: is someone who can publish compiling it?
      auto held = with_failover(*tier, manifest, [&](RemoteEndpoint& e) { return e.lease_held(name); });
      if (held.ok() && held.value()) taken.state = LeaseState::kHeldElsewhere;
    }
    ++out.polls;
    if (taken.state == LeaseState::kTaken) {
      out.state = WaitState::kTaken;
      out.lease = std::move(taken.lease);
      return out;
    }
    if (taken.state == LeaseState::kNone) {
      out.state = WaitState::kNone;
      return out;
    }
    ++out.polls;
    if (look()) {
      out.state = WaitState::kFound;
      return out;
    }
    if (!said) {
      KILN_LOG_AT(kInfo, "remote", name + " is held by another node; waiting for its artifact" + (watch ? "" : " (polling)"));
      said = true;
    }
    for (;;) {  // until a release, or the time to poll again
      auto now = Clock::now();
      if (now >= deadline) {
        out.state = WaitState::kTimedOut;
        return out;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      if (!watch) {
        std::this_thread::sleep_for(std::min(pause, left));
        pause = std::min(pause * 3 / 2, std::chrono::milliseconds(k_longest_pause));
        break;
      }
      int64_t watchers = 1;
      if (auto n = home.remote->lease_watchers(name); n.ok()) watchers = std::max<int64_t>(1, n.value());
      ++out.polls;
      auto spaced = std::chrono::milliseconds(static_cast<int64_t>(1000.0 * static_cast<double>(watchers) /
                                                                   std::max(0.001, m_options.lease_polls_per_second)));
      auto interval = std::max(spaced, std::chrono::milliseconds(k_shortest_watched_poll));
      // Jittered (0.5x..1.5x), so that waiters who started together do not poll together.
      interval = std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(interval.count()) *
                                                                (0.5 + static_cast<double>(random() % 1000) / 1000.0)));
      auto woke = watch->wait(std::min(interval, left));
      if (!woke.ok()) {
        KILN_LOG_AT(kDebug, "remote", woke.status().message() + "; polling " + name);
        watch.reset();
        break;
      }
      if (!woke.value()) break;  // time to poll: the holder may have died and its lease expired
      out.woken = true;
      ++out.polls;
      if (look()) {
        out.state = WaitState::kFound;
        return out;
      }
      break;  // released without the object (its compile failed): try to take it
    }
  }
}

RemoteTiers::Lease::~Lease() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  if (m_renewer.joinable()) m_renewer.join();
  if (m_endpoint) (void)m_endpoint->release_lease(m_name, m_holder);
}

}  // namespace kiln::cache
