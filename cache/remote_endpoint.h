// One server of a remote tier: a Redis server or an HTTP(S) object store. Objects are named by
// 64 hex digits; what they hold is opaque here (remote.h frames, signs and checks them). Every
// call is bounded by the timeouts; a connection that failed is dropped, never reused. Idle
// connections are kept for the next call (one per concurrent caller at most). Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::cache {

struct EndpointUrl {
  std::string scheme;  // "redis", "http", "https" or "s3"
  std::string host;    // s3: the bucket
  int port = 0;
  std::string path;  // http, s3: the folder (prefix) objects go under, with a trailing '/'; redis: unused
  int db = 0;        // redis: the database number
  // redis: the ACL user (Redis 6+) to AUTH as, and a password written in the URL ("" = the
  // tier's |password-file=, or none).
  std::string username;
  std::string password;
  // As written, less any credentials: the endpoint's label in messages and statistics, and
  // what rendezvous hashing ranks it by, so a reader's URL and a publisher's name one endpoint.
  std::string text;
};

// "redis://[user[:password]@]host[:port][/db]", "http[s]://host[:port][/path]". A Redis ACL
// user may be named in the URL; its password is better kept in |password-file= (a URL shows up
// in process lists and logs), but is taken inline too. Credentials in an http(s) URL are
// refused: they come from files (remote.h).
// "rediss://" is refused with the reason: Debian 12's hiredis (0.14) has no TLS.
// "s3://bucket[/prefix]": the server and region come from the tier's attributes (S3Options).
Result<EndpointUrl> parse_endpoint_url(std::string_view text);

struct EndpointOptions {
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds io_timeout{2000};  // the longest a server may stay silent
  // redis: keys are prefix + name. http: "flat" (<path><name>), "subdirs" (<path><n[0:2]>/<n[2:]>),
  // or "bazel" (<path>ac/<name>), the layouts of ccache's HTTP storage.
  std::string prefix = "kiln:";
  std::string layout = "flat";
  std::string authorization;  // http: the Authorization header's value ("Bearer ...")
  std::string http_user;      // http: the basic-auth user it names, for messages ("" with a token)
  std::string password;       // redis: AUTH (as EndpointUrl::username when it names one)
  // https: the CA bundle to trust instead of the system's (a PEM file), and the client
  // certificate (a PEM file) with its private key (PEM, already read from its owner-only file).
  std::string ca_file;
  std::string cert_file;
  std::string key_pem;
  bool has_client_certificate = false;
  // s3: the server ("" = AWS's regional endpoint https://s3.REGION.amazonaws.com), the region
  // requests are signed for, and how the bucket is named: "path" (server/bucket/key) or
  // "virtual" (bucket.server/key); "" = virtual for AWS, path for another server.
  std::string s3_endpoint;
  std::string s3_region;
  std::string s3_style;
  // The most bytes one object may hold: a reply that says or brings more is refused before
  // it is buffered (an answer's declared length is checked before anything is allocated).
  size_t max_object_bytes = size_t{2} << 30;
};

// An answer to a GET is first allocated at most this large (when its length is declared), then
// grows as its bytes arrive: an object of the default sizes (a chunk of 1 MiB, a whole artifact
// up to remote.chunk_threshold's 4 MiB, each in its envelope of 136 bytes and a signer's name)
// is received in one allocation, and a length that lies costs at most this much before the
// answer is refused. The largest answer taken is get()'s bound.
inline constexpr size_t k_first_answer_allocation = (size_t{4} << 20) + (64 << 10);

class RemoteEndpoint {
 public:
  virtual ~RemoteEndpoint() = default;
  const std::string& label() const { return m_url.text; }
  const EndpointUrl& url() const { return m_url; }

  // The object's bytes, or nullopt when the server does not have it. An answer larger than
  // max_bytes (the caller's bound for what it asks for: a chunk's size, a manifest's cap) or
  // than EndpointOptions::max_object_bytes is refused (kUnavailable) as it arrives, before it
  // is kept.
  //
  // Refusals. A write or a lease call that the server refuses for these credentials (Redis
  // -NOPERM, -WRONGPASS or -NOAUTH; HTTP 401 or 403 to a PUT) answers kPermissionDenied, naming
  // the endpoint, the user and the call: a reader's credentials, told apart from a server that
  // is down (remote.h: the tier turns read-only for the process, reads go on). A read or a ping
  // refused so answers kUnavailable: a node that cannot read is misconfigured, and its endpoint
  // is skipped and said like any failing one.
  Result<std::optional<std::string>> get(const std::string& name, size_t max_bytes = SIZE_MAX) {
    return get_at_most(name, max_bytes);
  }
  // The bound get() holds an answer to: max_bytes, but never under 64 KiB (a server's error
  // text for a small object's GET is still read and said) nor over max_object_bytes.
  static size_t answer_limit(size_t max_bytes, const EndpointOptions& options) {
    return std::min(std::max(max_bytes, size_t{64} << 10), options.max_object_bytes);
  }
  virtual Status put(const std::string& name, std::string_view bytes) = 0;
  // One round trip that shows the server answers (Redis PING, HTTP HEAD of the folder).
  virtual Status ping() = 0;

  // Leases: one holder per name for `ttl` unless renewed (Redis only; HTTP stores cannot set
  // a value only if it is absent, so a tier of them has no leases).
  virtual bool has_leases() const { return false; }
  // True when taken (the name was free); false when another holds it.
  virtual Result<bool> take_lease(const std::string& name, const std::string& holder, std::chrono::milliseconds ttl);
  // True when still ours and extended; false when it expired and someone else may hold it.
  virtual Result<bool> renew_lease(const std::string& name, const std::string& holder, std::chrono::milliseconds ttl);
  // Released by its holder: waiters that watch the lease are woken (remote.h, wait_for_holder).
  virtual Status release_lease(const std::string& name, const std::string& holder);
  // Whether someone holds the lease now, asked without writing (a reader holds none).
  virtual Result<bool> lease_held(const std::string& name);

  // A wake-up channel for the waiters of one lease, so that a thousand nodes waiting on one
  // compile cost the server nothing while they wait (Redis: SUBSCRIBE on a connection of its
  // own; the holder's release publishes). kUnavailable where the store has none (HTTP): the
  // waiters then poll.
  class LeaseWatch {
   public:
    virtual ~LeaseWatch() = default;
    // True when the lease was released (or the channel said something) within `timeout`;
    // false when nothing came; an error when the channel broke (then poll).
    virtual Result<bool> wait(std::chrono::milliseconds timeout) = 0;
  };
  virtual Result<std::unique_ptr<LeaseWatch>> watch_lease(const std::string& name);
  // How many watch the lease now (Redis: PUBSUB NUMSUB), so each waiter's fallback poll can be
  // spaced to keep the whole cluster's polls of one lease at a fixed rate.
  virtual Result<int64_t> lease_watchers(const std::string& name);

 protected:
  explicit RemoteEndpoint(EndpointUrl url) : m_url(std::move(url)) {}
  // get(), as each kind of server answers it.
  virtual Result<std::optional<std::string>> get_at_most(const std::string& name, size_t max_bytes) = 0;
  EndpointUrl m_url;
};

// An endpoint for `url` (nothing is connected yet, and libcurl is not loaded until the first
// HTTP request). kUnavailable for what this build cannot speak (redis:// without hiredis,
// http:// without libcurl's headers).
Result<std::unique_ptr<RemoteEndpoint>> make_endpoint(const EndpointUrl& url, const EndpointOptions& options);

}  // namespace kiln::cache
