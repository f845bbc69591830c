// Remote tiers: stores a cluster already runs (Redis, an HTTP object store), tried in order
// after the local store, so one node compiles and every other node loads.
//
// What is stored: two objects per compile, each named by 64 hex digits (the key's 32, then 31
// zeros and a type digit: 0 artifact, 1 manifest): the artifact, exactly the local store's blob
// file (self-describing: metadata, content, both hashes), by artifact key; and the header
// manifest by input key, which a node reads first to compute the artifact key from its own
// headers (cache/store.h). Each object travels in an envelope:
//
//   offset  size  field
//   0       8     magic "KILNREM1"
//   8       1     type: 'a' artifact, 'm' manifest
//   9       1     tag: 0 none, 1 HMAC-SHA256
//   10      6     zero
//   16      16    the key the object is stored under
//   32      32    HMAC-SHA256(secret, "kiln-remote-v1" | bytes 0..31 | payload), or zeros
//   64      ...   payload
//
// Trust. Without a secret, nothing from a remote is loaded unless its envelope names the key
// asked for (a swapped object is refused) and the blob's own XXH3 hashes and metadata check
// out (corruption and truncation are refused); a writer that means harm can still forge both.
// With a secret, an object must also carry a tag made with the same secret over its key and
// bytes: a missing or wrong tag is refused and counted, so only holders of the secret can
// publish what others load.
//
// Tiers list endpoints that share the keys by rendezvous hashing (as ccache's shards do):
// losing one endpoint loses only its share. An endpoint that fails (refused, timed out,
// garbled, its certificate untrusted, its credentials refused) is skipped by a breaker for a
// while, so a dead remote costs a process one short timeout, and a refusal one request. Publication happens on a background thread: a compile never waits for an upload.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/remote_endpoint.h"
#include "support/hash.h"
#include "support/status.h"

namespace kiln::cache {

enum class RemoteObject : char { kArtifact = 'a', kManifest = 'm' };

struct TierConfig {
  std::vector<EndpointUrl> endpoints;
  bool read_only = false;
  std::string prefix = "kiln:";  // redis keys
  std::string layout = "flat";   // http: flat, subdirs, bazel
  std::string token_file;        // http: "Authorization: Bearer <token>"
  std::string basic_auth_file;   // http: "user:password" for basic auth
  std::string password_file;     // redis: AUTH
  std::string label;             // the endpoints as written, joined by ','
  // The tier as `parse_tiers` reads it back.
  std::string str() const;
};

// Tiers separated by whitespace; each is ENDPOINT[,ENDPOINT...] followed by attributes:
// |read-only, |read-write, |prefix=P, |layout=flat|subdirs|bazel, |token-file=F,
// |basic-auth-file=F, |password-file=F. The endpoints of one tier share a scheme.
Result<std::vector<TierConfig>> parse_tiers(std::string_view text);

struct RemoteOptions {
  std::vector<TierConfig> tiers;
  std::string secret;  // empty: objects are neither signed nor required to be
  // https tiers: a PEM bundle of the CAs to trust instead of the system's; a client
  // certificate (PEM) and its key (PEM, in an owner-only file; else in the certificate's file).
  std::string ca_file, cert_file, key_file;
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds io_timeout{2000};
  std::chrono::milliseconds lease{30000};
  std::chrono::milliseconds breaker{60000};
  // Told when an endpoint fails and is skipped for a while (once per endpoint), and when an
  // object it sent is refused. `kind` ("failed <endpoint>", "refused <endpoint>") lets a
  // caller say each kind once. Null: say nothing.
  std::function<void(const std::string& kind, const std::string& message)> report;
};

// Per tier, since the last take_counters(); added to the local store's counters.
enum class TierCounter { kHits, kMisses, kErrors, kRejected, kSkipped, kBytesIn, kBytesOut, kPublished, kMicroseconds, kCount };
const char* tier_counter_name(TierCounter c);  // "hits", ..., "us"

// Envelopes (exposed for tests and tools).
std::string object_name(RemoteObject type, const Hash128& key);
Result<std::string> seal_object(RemoteObject type, const Hash128& key, std::string_view payload, const std::string& secret);
// The payload (a view into `envelope`), or kDataLoss saying what is wrong with the envelope.
Result<std::string_view> open_object(RemoteObject type, const Hash128& key, std::string_view envelope, const std::string& secret);

class RemoteTiers {
 public:
  // Reads credential files and makes the endpoints; nothing connects until first used.
  static Result<std::unique_ptr<RemoteTiers>> create(RemoteOptions options);
  // Waits for publications still under way (each bounded by the timeouts).
  ~RemoteTiers();

  const RemoteOptions& options() const { return m_options; }
  bool signing() const { return !m_options.secret.empty(); }

  // Asks each tier in order for the object. An envelope that fails its checks, or a payload
  // that `accept` refuses (it checks further and keeps what it needs: the view is valid only
  // during the call), is counted as rejected and the next tier is asked. True once a payload
  // was accepted; it is then also published to the writable tiers before the one that had it.
  // The payload is shown where it arrived, never copied (a 1 MiB artifact: ~0.1-0.2 ms a copy).
  bool fetch(RemoteObject type, const Hash128& key, const std::function<Status(std::string_view payload)>& accept);

  struct Publication {
    RemoteObject type;
    Hash128 key;
    std::string payload;
  };
  // Uploads to every writable tier on the background thread, in order, then calls `after`.
  void publish(std::vector<Publication> objects, std::function<void()> after = {});
  // Blocks until every publication queued so far is done.
  void drain();

  // One compile per key across the cluster: a lease on `input_key` in the first tier that has
  // leases (Redis). Held, it is renewed every third of its life until released.
  class Lease {
   public:
    ~Lease();  // releases
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    friend class RemoteTiers;
    Lease() = default;
    RemoteEndpoint* m_endpoint = nullptr;
    std::string m_name, m_holder;
    std::chrono::milliseconds m_ttl{0};
    std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stop = false;
    std::thread m_renewer;
  };
  enum class LeaseState { kTaken, kHeldElsewhere, kNone };
  struct LeaseResult {
    LeaseState state = LeaseState::kNone;  // kNone: no tier has leases, or it did not answer
    std::unique_ptr<Lease> lease;          // when taken
  };
  LeaseResult take_lease(const Hash128& input_key);
  bool has_leases() const;

  // For `kiln doctor`: one round trip to every endpoint.
  struct EndpointReport {
    std::string tier, endpoint;
    bool read_only = false;
    Status status;
    double rtt_ms = 0;
  };
  std::vector<EndpointReport> ping_all();

  // (tier label, counter name, value) for every nonzero counter, which is then reset.
  struct CounterValue {
    std::string tier;
    TierCounter counter;
    int64_t value;
  };
  std::vector<CounterValue> take_counters();

 private:
  struct Endpoint {
    std::unique_ptr<RemoteEndpoint> remote;
    std::atomic<int64_t> down_until_ms{0};
    std::atomic<bool> reported{false};
  };
  struct Tier {
    TierConfig config;
    std::vector<std::unique_ptr<Endpoint>> endpoints;
    std::array<std::atomic<int64_t>, static_cast<size_t>(TierCounter::kCount)> counters{};
    void add(TierCounter c, int64_t v) { counters[static_cast<size_t>(c)].fetch_add(v, std::memory_order_relaxed); }
  };

  explicit RemoteTiers(RemoteOptions options) : m_options(std::move(options)) {}
  // The endpoint of `tier` that owns `name` (rendezvous hashing).
  Endpoint& owner(Tier& tier, const std::string& name);
  // Runs `call` on the endpoint unless its breaker is open; failures open it.
  template <typename F>
  auto guarded(Tier& tier, Endpoint& endpoint, F&& call) -> decltype(call(*endpoint.remote));
  void put_everywhere(const Publication& p, size_t below_tier);
  struct Job {
    std::vector<Publication> objects;
    std::function<void()> after;
    size_t below_tier;  // publish to tiers [0, below_tier)
  };
  void enqueue(Job job);
  void worker();

  RemoteOptions m_options;
  std::vector<std::unique_ptr<Tier>> m_tiers;
  std::mutex m_refused_mutex;
  std::set<std::pair<size_t, std::string>> m_refused;  // (tier, object name)
  std::mutex m_queue_mutex;
  std::condition_variable m_queue_changed;
  std::deque<Job> m_queue;
  bool m_busy = false, m_stop = false;
  std::thread m_worker;
};

}  // namespace kiln::cache
