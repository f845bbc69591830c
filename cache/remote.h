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
//   0       8     magic "KILNREM2"
//   8       1     type: 'a' artifact, 'm' manifest
//   9       1     scheme: 0 unsigned, 1 HMAC-SHA256 (the cluster secret), 2 Ed25519 (a publisher key)
//   10      1     N, the length of the signer's key name (0-64; 0 unless Ed25519)
//   11      5     zero
//   16      16    the key the object is stored under
//   32      8     when it was signed (Unix seconds, little-endian; 0 unsigned)
//   40      32    SHA-256 of the payload (zeros unsigned)
//   72      64    the Ed25519 signature, or the HMAC tag then zeros, of the fingerprint below
//   136     N     the signer's key name
//   136+N   ...   payload
//
// The fingerprint signed (Nix's model: a fixed string of the signed fields in a stated order):
//   "kiln-remote-v2\n" SCHEME "\n" KEY-NAME "\n" NAMESPACE "\n" TYPE "\n" KEY-HEX "\n" SHA256-HEX "\n" SIGNED-AT
// where NAMESPACE is the tier's (tier_namespace: the Redis database and prefix, the HTTP folder,
// the S3 bucket and prefix; "bundle" in bundles), so an object replayed under another tenant's
// prefix, key or type fails its signature. SIGNED-AT is the publisher's clock, for audits (which
// key signed what, when): it is signed but no age is enforced; revoking the key is what stops
// its objects.
//
// Trust (cache/trust.h, docs/SECURITY.md). With publisher keys (remote.trusted_keys), an object
// loads only when it is signed by a trusted key that is not revoked, over its SHA-256; a node
// with no signing key publishes nothing. With only the older cluster secret, an HMAC tag over
// the same fingerprint: any holder of the secret can publish. With neither, nothing from a
// remote is loaded unless its envelope names the key asked for and the blob's own hashes and
// metadata check out; a writer that means harm can forge both (said once per process).
//
// Large artifacts (over RemoteOptions::chunk_threshold) travel as content-addressed chunks
// (remote_chunks.cpp): the artifact's object then holds a chunk list (signed as any object: it
// names the SHA-256 of every chunk and of the whole), each chunk is an object named by the
// SHA-256 of its bytes (checked whole on arrival), and the chunks are dealt out over the tier's endpoints in turn
// (in the artifact's rendezvous order), so a hot 173 MB PCH is served evenly by every endpoint
// of a tier, not by one. Chunks are
// fetched in parallel, each checked on arrival; an artifact is handed over only whole and
// checked; chunks that arrived before a failure are kept (spool_dir) and not fetched again.
//
// Tiers list endpoints that share the keys by rendezvous hashing (as ccache's shards do):
// losing one endpoint loses only its share; while an endpoint is down (its breaker open), what
// it owns is read from and written to the next endpoint in rendezvous order, so its share is
// compiled again once, not once per node. An endpoint that fails (refused, timed out,
// garbled, its certificate untrusted, its credentials refused) is skipped by a breaker for a
// while, so a dead remote costs a process one short timeout, and a refusal one request. Publication happens on a background thread: a compile never waits for an upload.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/remote_endpoint.h"
#include "cache/trust.h"
#include "support/hash.h"
#include "support/status.h"

namespace kiln::cache {

enum class RemoteObject : char { kArtifact = 'a', kManifest = 'm', kChunk = 'c' };

// The largest manifest a tier may send (its text; torch/extension.h's 4,841 headers take ~500
// KB): a longer answer is refused as it arrives, before it is buffered (builders' decoder
// holds a manifest to the same bound).
constexpr size_t k_max_manifest_bytes = size_t{16} << 20;

struct TierConfig {
  std::vector<EndpointUrl> endpoints;
  bool read_only = false;
  std::string prefix = "kiln:";  // redis keys
  std::string layout = "flat";   // http: flat, subdirs, bazel
  std::string token_file;        // http: "Authorization: Bearer <token>"
  std::string basic_auth_file;   // http: "user:password" for basic auth
  std::string password_file;     // redis: AUTH
  std::string s3_endpoint;       // s3: the server's URL ("" = AWS)
  std::string s3_region;         // s3: "" = $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1
  std::string s3_style;          // s3: path, virtual, or "" (virtual on AWS, path elsewhere)
  std::string label;             // the endpoints as written, joined by ','
  // The tier as `parse_tiers` reads it back.
  std::string str() const;
};

// Tiers separated by whitespace; each is ENDPOINT[,ENDPOINT...] followed by attributes:
// |read-only, |read-write, |prefix=P, |layout=flat|subdirs|bazel, |token-file=F,
// |basic-auth-file=F, |password-file=F; for s3://BUCKET/PREFIX tiers |endpoint=URL,
// |region=R and |style=path|virtual. The endpoints of one tier share a scheme.
Result<std::vector<TierConfig>> parse_tiers(std::string_view text);

struct RemoteOptions {
  std::vector<TierConfig> tiers;
  // Who publishes and whose objects load (cache/trust.h): publisher keys, else the older HMAC
  // secret, else nothing is signed.
  TrustConfig trust;
  // The most bytes one object (a whole artifact, put together from its chunks) may hold: a
  // tier that says or sends more is refused before the bytes are kept.
  size_t max_object_bytes = size_t{2} << 30;
  // https tiers: a PEM bundle of the CAs to trust instead of the system's; a client
  // certificate (PEM) and its key (PEM, in an owner-only file; else in the certificate's file).
  std::string ca_file, cert_file, key_file;
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds io_timeout{2000};
  std::chrono::milliseconds lease{30000};
  std::chrono::milliseconds breaker{60000};
  // Artifacts larger than this travel as chunks of chunk_bytes, up to chunk_parallel at once.
  // 1 MiB chunks: a 173 MB PCH is 166 of them, 27 or 28 on each of 6 endpoints; fetched 8 at a
  // time, a node keeps every shard busy (tools/bench/cluster_sim.py measures the spread).
  size_t chunk_threshold = size_t{4} << 20;
  size_t chunk_bytes = size_t{1} << 20;
  int chunk_parallel = 8;
  // Where chunks that arrived are kept when an artifact's fetch fails part way, so the next
  // fetch resumes; "" keeps them in memory for this process only.
  std::string spool_dir;
  // The polls of one lease by all its waiters together, per second, when the store can wake
  // them (Redis): each waiter spaces its polls by watchers / lease_polls_per_second (at least
  // a second), so the cluster's load while it waits does not grow with its size.
  double lease_polls_per_second = 10;
  // False: waiters poll (20 ms growing to 0.5 s) even where the store could wake them; for
  // measuring what watching saves (tools/bench/cluster_sim.py).
  bool watch_leases = true;
  // Told when an endpoint fails and is skipped for a while (once per endpoint), and when an
  // object it sent is refused. `kind` ("failed <endpoint>", "refused <endpoint>") lets a
  // caller say each kind once. Null: say nothing.
  std::function<void(const std::string& kind, const std::string& message)> report;
};

// Per tier, since the last take_counters(); added to the local store's counters.
enum class TierCounter { kHits, kMisses, kErrors, kRejected, kSkipped, kBytesIn, kBytesOut, kPublished, kMicroseconds, kCount };
const char* tier_counter_name(TierCounter c);  // "hits", ..., "us"

// Envelopes (exposed for tests, bundles and tools).
std::string object_name(RemoteObject type, const Hash128& key);
// A chunk's name: the first 128 bits of the SHA-256 of its bytes, as object_name shapes names
// (the list that names it carries, and the reader checks, the whole SHA-256).
std::string chunk_object_name(const Sha256& hash);
// The namespace a tier's objects are signed under: "redis:DB/PREFIX", "http:/FOLDER",
// "s3:BUCKET/PREFIX" (so two tenants' objects cannot be replayed across).
std::string tier_namespace(const TierConfig& tier);
inline constexpr std::string_view k_bundle_namespace = "bundle";
// Signs with trust's signing key (Ed25519), else its secret (HMAC), else leaves it unsigned.
// kPermissionDenied when trust has keys but no signing key: a reader publishes nothing.
Result<std::string> seal_object(RemoteObject type, const Hash128& key, std::string_view payload, const TrustConfig& trust,
                                std::string_view ns, int64_t signed_at = 0 /* 0: now */);
// The payload (a view into `envelope`), or kDataLoss saying what is wrong with the envelope or
// who signed it; `signer`, when given, gets the key name that signed it ("" unless Ed25519).
Result<std::string_view> open_object(RemoteObject type, const Hash128& key, std::string_view envelope, const TrustConfig& trust,
                                     std::string_view ns, std::string* signer = nullptr);
// Whether an artifact object's payload is a chunk list (remote_chunks.cpp) rather than the artifact.
bool is_chunk_list(std::string_view payload);

class RemoteTiers {
 public:
  // Reads credential files and makes the endpoints; nothing connects until first used.
  static Result<std::unique_ptr<RemoteTiers>> create(RemoteOptions options);
  // Waits for publications still under way (each bounded by the timeouts).
  ~RemoteTiers();

  const RemoteOptions& options() const { return m_options; }
  bool signing() const { return m_options.trust.keys() || !m_options.trust.secret.empty(); }

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
    // Shared with the tier: a claim may outlive the Ops that made it (a Python Claim collected at
    // exit after the context), and its release still reaches the server.
    std::shared_ptr<RemoteEndpoint> m_endpoint;
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

  // Waits for another node's compile of `input_key`: watches its lease (woken when it is
  // released; polling, spaced by the number of watchers, as a fallback), calls `look` after
  // each release, and takes the lease when it is free. kFound: `look` found the object.
  // kTaken: this node holds the lease now (look again, then compile). kNone: no tier answers.
  // kTimedOut: `max_wait` passed.
  enum class WaitState { kFound, kTaken, kNone, kTimedOut };
  struct WaitResult {
    WaitState state = WaitState::kNone;
    std::unique_ptr<Lease> lease;  // when taken
    int polls = 0;                 // requests this waiter made while it waited
    bool woken = false;            // a release woke it (rather than a poll)
  };
  WaitResult wait_for_holder(const Hash128& input_key, std::chrono::milliseconds max_wait, const std::function<bool()>& look);

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
    std::shared_ptr<RemoteEndpoint> remote;  // shared with the leases taken on it
    std::atomic<int64_t> down_until_ms{0};
    std::atomic<bool> reported{false};
  };
  struct Tier {
    TierConfig config;
    std::string ns;                       // tier_namespace(config)
    std::atomic<bool> denied{false};      // the server refused this node's writes: publish no more
    std::vector<std::unique_ptr<Endpoint>> endpoints;
    std::array<std::atomic<int64_t>, static_cast<size_t>(TierCounter::kCount)> counters{};
    void add(TierCounter c, int64_t v) { counters[static_cast<size_t>(c)].fetch_add(v, std::memory_order_relaxed); }
  };

  explicit RemoteTiers(RemoteOptions options) : m_options(std::move(options)) {}
  // The endpoints of `tier` in rendezvous order for `name`: the first owns it.
  std::vector<Endpoint*> ranked(Tier& tier, const std::string& name);
  // The first endpoint in that order whose breaker is closed (the owner when all are open).
  Endpoint& owner(Tier& tier, const std::string& name);
  bool is_down(const Endpoint& e) const;
  // `call` on the owner of `name`, or on the next endpoint in rendezvous order when the owner
  // is down or fails (two endpoints at most); `used` says which answered.
  Result<bool> with_failover(Tier& tier, const std::string& name, const std::function<Result<bool>(RemoteEndpoint&)>& call,
                             Endpoint** used = nullptr);
  // The same over endpoints in the order given (a chunk's: its artifact's order, rotated).
  Result<bool> with_failover(Tier& tier, const std::vector<Endpoint*>& order, const std::function<Result<bool>(RemoteEndpoint&)>& call,
                             Endpoint** used = nullptr);
  // Where chunk `index` of the artifact `key` lives: the artifact's rendezvous order of the
  // tier's endpoints, rotated by the index, so an artifact's chunks are dealt out evenly (an
  // endpoint holds n/S of them, to within one) rather than as hashing happens to fall.
  std::vector<Endpoint*> chunk_order(Tier& tier, const Hash128& key, size_t index);
  // The artifact a chunk list names, fetched from `tier` and checked; kDataLoss when a chunk or
  // the whole is wrong, kUnavailable when a chunk could not be had (the chunks that did arrive
  // are kept for the next try).
  Result<std::string> assemble(Tier& tier, const Hash128& key, std::string_view list);
  // Uploads `payload` as chunks to `tier`, then returns the chunk list to store in its place.
  Result<std::string> put_chunks(Tier& tier, const Hash128& key, std::string_view payload);
  LeaseResult take_lease_on(Tier& tier, const Hash128& input_key);
  // Runs `call` on the endpoint unless its breaker is open; failures open it.
  template <typename F>
  auto guarded(Tier& tier, Endpoint& endpoint, F&& call) -> decltype(call(*endpoint.remote));
  void put_everywhere(const Publication& p, size_t below_tier);
  // The tier refused a write for these credentials: publish nothing more to it, said once.
  void deny(Tier& tier, const Status& why);
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
  std::mutex m_spool_mutex;
  std::map<Sha256, std::string> m_spool;  // chunks kept in memory when there is no spool_dir
  std::mutex m_queue_mutex;
  std::condition_variable m_queue_changed;
  std::deque<Job> m_queue;
  bool m_busy = false, m_stop = false;
  std::thread m_worker;
};

}  // namespace kiln::cache
