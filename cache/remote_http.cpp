// An HTTP object store: GET, PUT and HEAD of one object per name, the protocol of ccache's HTTP
// storage, bazel-remote and an nginx WebDAV share, spoken through libcurl (cache/curl_api.h):
// TLS with the peer's certificate and name verified, client certificates, proxies from the
// environment (HTTPS_PROXY, NO_PROXY), redirects; HTTP/1.1 with keep-alive (see the tuning
// constants for why not HTTP/2).
//
// Each request runs in a multi handle of its own that kiln polls, rather than through
// curl_easy_perform: libcurl bounds a whole transfer or a speed over whole seconds, and the
// contract here is a silence of `io_timeout` (250 ms in tests). An idle (multi, easy) pair
// keeps its connection for the next request, one pair per concurrent caller; TLS sessions
// are shared between them, so a second connection resumes rather than repeats a handshake.
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "cache/remote_endpoint.h"
#include "cache/remote_s3_credentials.h"
#include "support/log.h"

#if KILN_WITH_CURL
#include "cache/curl_api.h"
#endif

namespace kiln::cache {

#if KILN_WITH_CURL
namespace {

using Clock = std::chrono::steady_clock;

// Redirects followed (a load balancer, a moved folder); more is a loop.
constexpr long k_max_redirects = 5;
// Tuning, from kiln_remote_bench BM_RemoteHit/<http|https>/bytes:1048576/signed:0 (p50 of
// 5 repetitions, the 2-core AMD EPYC dev VM under load 5-7, 2026-11-25):
// - libcurl's receive buffer: 16 KiB by default. 512 KiB took a 1 MiB hit from 0.90 to 0.77 ms
//   over http and, over https, from 1.7-2.4 ms to 1.3-1.6 ms; 128 KiB and 2 MiB did no better.
// - HTTP/1.1 rather than HTTP/2 over TLS: with the 512 KiB buffer, p50 1.32-1.57 ms against
//   1.60-2.12 ms for HTTP/2, whose framing costs CPU; kiln keeps one connection per concurrent
//   caller, so HTTP/2's multiplexing would save nothing.
constexpr long k_receive_buffer_bytes = 512 << 10;
constexpr long k_http_version = CURL_HTTP_VERSION_1_1;
// S3 answers 503 SlowDown (and 500, 429) when a prefix is asked too much at once; the SDKs
// retry with jittered exponential backoff. So does kiln: 5 tries, 50 ms doubling to at most
// 800 ms between them (~1.5 s at most in all), then the endpoint counts as failed (breaker).
constexpr int k_s3_tries = 5;
constexpr auto k_s3_first_backoff = std::chrono::milliseconds(50);
constexpr auto k_s3_longest_backoff = std::chrono::milliseconds(800);

struct Response {
  long status = 0;
  std::string body;
};

// The <Code> of an S3 error answer ("SignatureDoesNotMatch"), or "".
std::string s3_error_code(const std::string& body) {
  size_t a = body.find("<Code>");
  if (a == std::string::npos) return "";
  size_t b = body.find("</Code>", a);
  return b == std::string::npos ? "" : body.substr(a + 6, b - a - 6);
}

// What the callbacks of one request see.
struct Transfer {
  std::string body;
  size_t max_bytes = 0;  // EndpointOptions::max_object_bytes
  bool too_large = false;
  bool out_of_memory = false;
  std::string_view upload;
  size_t sent = 0;
  Clock::time_point last_activity;
};

size_t on_write(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  if (n > t->max_bytes - t->body.size()) {
    t->too_large = true;
    return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
  }
  try {
    t->body.append(data, n);
  } catch (const std::bad_alloc&) {  // never through libcurl's C frames
    t->out_of_memory = true;
    return 0;
  }
  t->last_activity = Clock::now();
  return n;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  t->last_activity = Clock::now();
  // The announced length, so a 1 MiB body is received into one allocation.
  constexpr std::string_view k_length = "content-length:";
  if (n > k_length.size() && strncasecmp(data, k_length.data(), k_length.size()) == 0) {
    unsigned long long length =
        std::strtoull(std::string(data + k_length.size(), n - k_length.size()).c_str(), nullptr, 10);
    if (length > t->max_bytes) {
      t->too_large = true;
      return 0;
    }
    t->body.clear();  // a redirect's body, if any, is not the answer
    try {
      t->body.reserve(static_cast<size_t>(std::min<unsigned long long>(length, k_first_answer_allocation)));
    } catch (const std::bad_alloc&) {
      t->out_of_memory = true;
      return 0;
    }
  }
  return n;
}

size_t on_read(char* buffer, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = std::min(size * count, t->upload.size() - t->sent);
  std::memcpy(buffer, t->upload.data() + t->sent, n);
  t->sent += n;
  t->last_activity = Clock::now();
  return n;
}

// A redirected PUT sends its body again.
int on_seek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > t->upload.size()) return CURL_SEEKFUNC_CANTSEEK;
  t->sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// Locks for what the connections of one endpoint share (TLS sessions, resolved names).
struct ShareLocks {
  std::mutex locks[CURL_LOCK_DATA_LAST];
  static void lock(CURL*, curl_lock_data data, curl_lock_access, void* user) {
    static_cast<ShareLocks*>(user)->locks[data].lock();
  }
  static void unlock(CURL*, curl_lock_data data, void* user) { static_cast<ShareLocks*>(user)->locks[data].unlock(); }
};

class HttpEndpoint final : public RemoteEndpoint {
 public:
  HttpEndpoint(EndpointUrl url, EndpointOptions options, EndpointUrl server = {})
      : RemoteEndpoint(std::move(url)), m_options(std::move(options)) {
    m_s3 = m_url.scheme == "s3";
    const EndpointUrl& where = m_s3 ? server : m_url;
    m_scheme = where.scheme;
    std::string host = where.host.find(':') != std::string::npos ? "[" + where.host + "]" : where.host;
    if (m_s3) {
      m_region = m_options.s3_region.empty() ? s3_default_region() : m_options.s3_region;
      bool is_virtual = m_options.s3_style == "virtual" || (m_options.s3_style.empty() && m_options.s3_endpoint.empty());
      // Path style: server/bucket/prefix/name. Virtual hosts: bucket.server/prefix/name.
      if (is_virtual) host = m_url.host + "." + host;
      m_folder = is_virtual ? m_url.path : "/" + m_url.host + m_url.path;
      m_sigv4 = "aws:amz:" + m_region + ":s3";
      m_credentials = std::make_unique<S3CredentialSource>(
          m_region, [this](const std::string& full, const std::string& form) -> Result<std::pair<long, std::string>> {
        KILN_ASSIGN_OR_RETURN(Response r, request("POST", full, form, Sign::kNo));
        return std::pair<long, std::string>(r.status, std::move(r.body));
      });
    } else {
      m_folder = m_url.path;
    }
    m_base = where.scheme + "://" + host + ":" + std::to_string(where.port);
  }
  ~HttpEndpoint() override {
    if (!m_api) return;
    for (auto& c : m_idle) close(*c);
    if (m_share) m_api->curl_share_cleanup(m_share);
  }

  Result<std::optional<std::string>> get_at_most(const std::string& name, size_t max_bytes) override {
    KILN_ASSIGN_OR_RETURN(Response r, send("GET", name, {}, answer_limit(max_bytes, m_options)));
    if (r.status == 200) return std::optional<std::string>(std::move(r.body));
    // A bucket that is not there is a mistake to hear about, not a miss.
    if (r.status == 404 && !(m_s3 && s3_error_code(r.body) == "NoSuchBucket")) return std::optional<std::string>();
    return refused("GET", name, r);
  }

  Status put(const std::string& name, std::string_view bytes) override {
    KILN_ASSIGN_OR_RETURN(Response r, send("PUT", name, bytes));
    if (r.status >= 200 && r.status < 300) return {};
    // S3: another node's write of the object is under way (409), or a server that still
    // answers a conditional write (412): the object is being or was written; taken as done.
    if (m_s3 && (r.status == 412 || r.status == 409)) return {};
    return refused("PUT", name, r);
  }

  Status ping() override {
    // HEAD of an object no one stores: a store that answers says 404 (or 200).
    KILN_ASSIGN_OR_RETURN(Response r, send("HEAD", std::string(64, '0'), {}));
    if (r.status == 200 || r.status == 404) return {};
    return refused("HEAD", std::string(64, '0'), r);
  }

 private:
  // One transfer at a time: an easy handle and the multi handle it runs in, whose connection
  // cache keeps the connection for the next request.
  struct Connection {
    CURLM* multi = nullptr;
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    char error[CURL_ERROR_SIZE] = {};
    Transfer transfer;
  };

  std::string object_path(const std::string& name) const {
    if (m_options.layout == "subdirs" && name.size() > 2) return m_folder + name.substr(0, 2) + "/" + name.substr(2);
    if (m_options.layout == "bazel") return m_folder + "ac/" + name;
    return m_folder + name;
  }

  // One request for an object; on S3, a 503 SlowDown (or a 500 or 429) is tried again after a
  // jittered, doubling pause.
  // limit: the most bytes the answer may bring (max_object_bytes when 0).
  Result<Response> send(const char* method, const std::string& name, std::string_view body, size_t limit = 0) {
    if (!m_s3) return request(method, object_path(name), body, Sign::kNo, limit);
    thread_local std::mt19937_64 random{std::random_device{}()};
    auto pause = std::chrono::milliseconds(k_s3_first_backoff);
    for (int attempt = 1;; ++attempt) {
      KILN_ASSIGN_OR_RETURN(Response r, request(method, object_path(name), body, Sign::kYes, limit));
      bool busy = r.status == 503 || r.status == 500 || r.status == 429;
      if (!busy || attempt == k_s3_tries) return r;
      KILN_LOG_AT(kDebug, "remote", label() + ": " + method + " " + name + " answered " + std::to_string(r.status) + " " +
                                        s3_error_code(r.body) + "; trying again in " + std::to_string(pause.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds(
          static_cast<int64_t>(static_cast<double>(pause.count()) * (0.5 + static_cast<double>(random() % 1000) / 1000.0))));
      pause = std::min(pause * 2, std::chrono::milliseconds(k_s3_longest_backoff));
    }
  }

  // Who the server was told this request comes from, for messages: " as user 'NAME'" (basic
  // auth), " with the tier's token" (a bearer token), or "".
  std::string as_user() const {
    if (!m_options.http_user.empty()) return " as user '" + m_options.http_user + "'";
    return m_options.authorization.empty() ? "" : " with the tier's token";
  }

  Status refused(const char* method, const std::string& name, const Response& r) const {
    if (m_s3) return refused_s3(method, name, r);
    long status = r.status;
    std::string hint;
    if (status == 401 || status == 403) {
      // A write refused for these credentials is told apart from a server that is down (a
      // reader's: remote_endpoint.h); a read refused is a failure like any other.
      bool write = std::strcmp(method, "PUT") == 0;
      hint = write ? " (these credentials may not write here: a reader's, or a token-file or basic-auth-file the server does "
                     "not know; docs/SECURITY.md, 'Server roles')"
                   : " (the server refused the credentials: check the tier's token-file or basic-auth-file" +
                         std::string(m_url.scheme == "https" ? ", and remote.cert_file if it asks for a client certificate)" : ")");
      return Status(write ? StatusCode::kPermissionDenied : StatusCode::kUnavailable,
                    label() + ": the server refused " + method + " " + object_path(name) + as_user() + ": HTTP " +
                        std::to_string(status) + hint);
    }
    if (status == 400 && m_url.scheme == "https" && !m_options.has_client_certificate)
      hint = " (a server that asks for a client certificate answers 400 without one: set remote.cert_file and "
             "remote.key_file)";
    if (status == 405 || status == 501)
      hint = std::string(" (the server does not take ") + method +
             ": for nginx, dav_methods PUT; create_full_put_path on;)";
    if (status == 409) hint = " (a folder on the way is missing: for nginx, create_full_put_path on;)";
    if (status == 400 && m_options.layout == "bazel")
      hint = " (bazel-remote checks /ac/ entries are ActionResults: start it with --disable_http_ac_validation)";
    return unavailable(label() + ": " + method + " " + object_path(name) + " answered HTTP " + std::to_string(status) +
                       hint);
  }

  Status refused_s3(const char* method, const std::string& name, const Response& r) const {
    std::string code = s3_error_code(r.body), hint, source, access_key;
    {
      std::lock_guard lock(m_mutex);
      source = m_signed_with;
      access_key = m_signed_key;
    }
    std::string who = source.empty() ? "" : " (credentials from " + source + ")";
    if (code == "SignatureDoesNotMatch")
      hint = ": the secret key does not match the access key" + who + ", or a proxy altered the request";
    else if (code == "InvalidAccessKeyId")
      hint = ": the server knows no such access key" + who;
    else if (code == "RequestTimeTooSkewed")
      hint = ": this node's clock is more than 15 minutes off the server's; set it right (chrony, systemd-timesyncd)";
    else if (code == "ExpiredToken" || code == "InvalidToken")
      hint = ": the session token has expired or is not valid" + who;
    else if (code == "AccessDenied" || r.status == 403)
      hint = ": the credentials" + who + " may not " + method + " in s3://" + m_url.host + m_url.path +
             (std::strcmp(method, "GET") == 0
                  ? " (a policy without s3:ListBucket on the bucket answers 403, not 404, for an object that is not there: "
                    "allow it to readers; docs/SECURITY.md, 'Server roles')"
                  : std::strcmp(method, "PUT") == 0 ? " (a reader's: its policy allows no s3:PutObject)" : "");
    else if (code == "NoSuchBucket")
      hint = ": the bucket " + m_url.host + " does not exist at " + m_base + " (create it, or fix the tier's bucket or endpoint=)";
    else if (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" || r.status == 301)
      hint = ": the bucket lives in another region than " + m_region + " (set |region= on the tier)";
    else if (r.status == 503 || r.status == 500 || r.status == 429)
      hint = ": still so after " + std::to_string(k_s3_tries) + " tries with backoff (the server is overloaded or rate limits this prefix)";
    std::string what = std::string(method) + " " + object_path(name);
    if ((r.status == 401 || r.status == 403) && std::strcmp(method, "PUT") == 0)
      return permission_denied(label() + ": the server refused " + what +
                               (access_key.empty() ? "" : " for access key " + access_key) + ": HTTP " +
                               std::to_string(r.status) + (code.empty() ? "" : " " + code) + hint);
    return unavailable(label() + ": " + what + " answered HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                       hint);
  }

  // The proxy libcurl takes from the environment for this scheme, as "NAME=value", or "" (it
  // skips it for the hosts NO_PROXY lists; this does not look).
  std::string proxy_variable() const {
    std::vector<const char*> names{"http_proxy"};  // libcurl reads no HTTP_PROXY: a CGI's request could set it
    if (m_scheme == "https") names = {"https_proxy", "HTTPS_PROXY"};
    names.insert(names.end(), {"all_proxy", "ALL_PROXY"});
    for (const char* name : names)
      if (const char* v = std::getenv(name); v && *v) return std::string(name) + "=" + v;
    return "";
  }

  // What went wrong with a transfer libcurl ended, and what to do about it.
  std::string explain(CURLcode rc, const Connection& c) const {
    std::string what = c.error[0] ? std::string(c.error) : m_api->curl_easy_strerror(rc);
    auto has = [&](const char* s) { return what.find(s) != std::string::npos; };
    std::string proxy = proxy_variable();
    if (!proxy.empty() && (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_RECV_ERROR ||
                           rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_GOT_NOTHING || has("CONNECT") || has("roxy")))
      return what + " (through the proxy " + proxy +
             ": is it up? A host that should be reached directly goes in NO_PROXY)";
    switch (rc) {
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
        if (has("expired")) return what + " (the server's certificate has expired: it must be renewed on the server)";
        if (has("subject name") || has("does not match") || has("hostname"))
          return what + " (the certificate is not issued for " + m_url.host +
                 ": reach the server by a name or address its certificate holds)";
        if (rc == CURLE_SSL_CACERT_BADFILE)
          return what + " (the CA bundle " + m_options.ca_file +
                 " cannot be used: remote.ca_file names a PEM file of CA certificates)";
        return what + " (the server's certificate is not signed by a CA this node trusts: name the CA bundle that " +
               "signed it in remote.ca_file or KILN_REMOTE_CA_FILE" +
               (m_options.ca_file.empty() ? "" : ", not " + m_options.ca_file) + ")";
      case CURLE_SSL_CERTPROBLEM:
        return what + " (the client certificate " + m_options.cert_file +
               " cannot be used with its key: remote.cert_file and remote.key_file name PEM files of one pair)";
      case CURLE_SSL_CONNECT_ERROR:
        return what +
               " (the TLS handshake failed: is this an https:// server, and does it take this node's certificate?)";
      case CURLE_UNSUPPORTED_PROTOCOL:
        return what + (m_scheme == "https" ? " (the server redirected to http://: an https:// tier never follows a redirect "
                                                 "out of TLS; fix the server, or name the place it redirects to)"
                                               : " (the server redirected to a scheme kiln does not speak)");
      case CURLE_COULDNT_CONNECT:
        return "cannot connect: " + what;
      case CURLE_OPERATION_TIMEDOUT:
        return "timed out: " + what +
               " (remote.connect_timeout bounds the connection and its TLS handshake, remote.timeout each silence)";
      default:
        return what;
    }
  }

  Result<std::unique_ptr<Connection>> open_connection() {
    auto c = std::make_unique<Connection>();
    c->multi = m_api->curl_multi_init();
    c->easy = m_api->curl_easy_init();
    if (!c->multi || !c->easy) {
      close(*c);
      return unavailable(label() + ": libcurl could not make a handle (out of memory?)");
    }
    CURL* e = c->easy;
    CURLcode rc = CURLE_OK;
    auto set = [&](CURLoption option, auto value) {
      if (rc == CURLE_OK) rc = m_api->curl_easy_setopt(e, option, value);
    };
    set(CURLOPT_ERRORBUFFER, c->error);
    set(CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for name lookups: the process has other threads
    set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(m_options.connect_timeout.count()));
    // No request may outlast ten silences: a server trickling bytes still ends.
    set(CURLOPT_TIMEOUT_MS, static_cast<long>((m_options.connect_timeout + 10 * m_options.io_timeout).count()));
    const char* protocols = m_scheme == "https" ? "https" : "http,https";  // never from https down to http
    set(CURLOPT_PROTOCOLS_STR, protocols);
    set(CURLOPT_REDIR_PROTOCOLS_STR, protocols);
    set(CURLOPT_FOLLOWLOCATION, 1L);
    set(CURLOPT_MAXREDIRS, k_max_redirects);
    set(CURLOPT_HTTP_VERSION, k_http_version);
    set(CURLOPT_BUFFERSIZE, k_receive_buffer_bytes);
    set(CURLOPT_USERAGENT, "kiln");
    set(CURLOPT_SSL_VERIFYPEER, 1L);
    set(CURLOPT_SSL_VERIFYHOST, 2L);
    if (!m_options.ca_file.empty()) set(CURLOPT_CAINFO, m_options.ca_file.c_str());
    if (!m_options.cert_file.empty()) {
      set(CURLOPT_SSLCERT, m_options.cert_file.c_str());
      set(CURLOPT_SSLCERTTYPE, "PEM");
      curl_blob key{const_cast<char*>(m_options.key_pem.data()), m_options.key_pem.size(), CURL_BLOB_COPY};
      set(CURLOPT_SSLKEY_BLOB, &key);
      set(CURLOPT_SSLKEYTYPE, "PEM");
    }
    set(CURLOPT_SHARE, m_share);
    set(CURLOPT_WRITEFUNCTION, &on_write);
    set(CURLOPT_WRITEDATA, &c->transfer);
    set(CURLOPT_HEADERFUNCTION, &on_header);
    set(CURLOPT_HEADERDATA, &c->transfer);
    set(CURLOPT_READFUNCTION, &on_read);
    set(CURLOPT_READDATA, &c->transfer);
    set(CURLOPT_SEEKFUNCTION, &on_seek);
    set(CURLOPT_SEEKDATA, &c->transfer);
    // An upload goes at once: waiting for "100 Continue" costs a round trip per upload, and a
    // second where a server ignores Expect. (S3's headers are made per request: libcurl 7.88
    // signs a header given empty to remove it, and the server, not sent it, refuses the
    // signature; so there libcurl sends its Expect and does not wait for the answer.)
    if (m_s3) {
      set(CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
      if (rc != CURLE_OK) {
        std::string why = m_api->curl_easy_strerror(rc);
        close(*c);
        return unavailable(label() + ": " + m_api_version + " refused an option: " + why);
      }
      return c;
    }
    c->headers = m_api->curl_slist_append(c->headers, "Expect:");
    c->headers = m_api->curl_slist_append(c->headers, "Content-Type: application/octet-stream");
    if (!m_options.authorization.empty())
      c->headers = m_api->curl_slist_append(c->headers, ("Authorization: " + m_options.authorization).c_str());
    set(CURLOPT_HTTPHEADER, c->headers);
    if (rc != CURLE_OK) {
      std::string why = m_api->curl_easy_strerror(rc);
      close(*c);
      return unavailable(label() + ": " + m_api_version + " refused an option: " + why);
    }
    return c;
  }

  void close(Connection& c) {
    if (c.easy) m_api->curl_easy_cleanup(c.easy);
    if (c.multi) m_api->curl_multi_cleanup(c.multi);
    if (c.headers) m_api->curl_slist_free_all(c.headers);
    c = {};
  }

  // libcurl is loaded, and what every connection shares is made, on the first request.
  Status prepare() {
    std::lock_guard lock(m_mutex);
    if (m_api) return {};
    KILN_ASSIGN_OR_RETURN(const CurlApi* api, curl_api());
    if (m_scheme == "https" && !(api->curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_SSL))
      return unavailable(label() + ": " + api->version + " has no TLS: install Debian's libcurl4 (OpenSSL)");
    m_share = api->curl_share_init();
    if (m_share) {
      api->curl_share_setopt(m_share, CURLSHOPT_LOCKFUNC, &ShareLocks::lock);
      api->curl_share_setopt(m_share, CURLSHOPT_UNLOCKFUNC, &ShareLocks::unlock);
      api->curl_share_setopt(m_share, CURLSHOPT_USERDATA, &m_share_locks);
      api->curl_share_setopt(m_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
      api->curl_share_setopt(m_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    }
    m_api_version = api->version;
    m_api = api;
    return {};
  }

  enum class Sign { kNo, kYes };

  // The headers of one S3 request, signed by libcurl with the credentials it sets here.
  Status sign_s3(Connection& c, const char* method) {
    KILN_ASSIGN_OR_RETURN(S3Credentials creds, m_credentials->get());
    {
      std::lock_guard lock(m_mutex);
      m_signed_with = creds.source;
      m_signed_key = creds.access_key;
    }
    CURL* e = c.easy;
    m_api->curl_easy_setopt(e, CURLOPT_AWS_SIGV4, m_sigv4.c_str());
    m_api->curl_easy_setopt(e, CURLOPT_USERNAME, creds.access_key.c_str());
    m_api->curl_easy_setopt(e, CURLOPT_PASSWORD, creds.secret_key.c_str());
    if (c.headers) m_api->curl_slist_free_all(c.headers);
    c.headers = nullptr;
    // Kiln checks what it loads itself (hashes, signatures), so the body is not hashed twice.
    c.headers = m_api->curl_slist_append(c.headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!creds.session_token.empty())
      c.headers = m_api->curl_slist_append(c.headers, ("x-amz-security-token: " + creds.session_token).c_str());
    if (std::strcmp(method, "PUT") == 0) {
      c.headers = m_api->curl_slist_append(c.headers, "Content-Type: application/octet-stream");
      // The last writer wins, as on Redis and HTTP stores: an object that fails its checks
      // (written first by someone without a trusted key) must not block its key, so the trusted
      // publisher's write replaces it (docs/SECURITY.md). S3's PUT is atomic: a reader gets the
      // old object or the new one, never a mix.
    }
    m_api->curl_easy_setopt(e, CURLOPT_HTTPHEADER, c.headers);
    return {};
  }

  // `path` under this endpoint's server, or a whole URL (STS's); unsigned unless `sign`.
  Result<Response> request(const char* method, const std::string& path, std::string_view body, Sign sign, size_t limit = 0) {
    if (limit == 0) limit = m_options.max_object_bytes;
    if (Status st = prepare(); !st.ok()) return unavailable(label() + ": " + st.message());
    std::unique_ptr<Connection> c;
    bool whole_url = path.rfind("http", 0) == 0;
    // A request elsewhere (STS) gets a connection of its own, never kept: no signing options
    // stay on it, and no pooled connection points at another server.
    if (whole_url) {
      KILN_ASSIGN_OR_RETURN(c, open_connection());
    }
    if (!c) {
      std::lock_guard lock(m_mutex);
      if (!m_idle.empty()) {
        c = std::move(m_idle.back());
        m_idle.pop_back();
      }
    }
    if (!c) {
      KILN_ASSIGN_OR_RETURN(c, open_connection());
    }
    CURL* e = c->easy;
    std::string url = whole_url ? path : m_base + path;
    if (sign == Sign::kYes) {
      if (Status st = sign_s3(*c, method); !st.ok()) {
        std::lock_guard lock(m_mutex);
        m_idle.push_back(std::move(c));
        return unavailable(label() + ": " + st.message());
      }
    }
    m_api->curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    // Whatever the last request was, this one starts as a GET.
    m_api->curl_easy_setopt(e, CURLOPT_UPLOAD, 0L);
    m_api->curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
    m_api->curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (std::strcmp(method, "HEAD") == 0) m_api->curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (std::strcmp(method, "PUT") == 0) {
      m_api->curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
      m_api->curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    if (std::strcmp(method, "POST") == 0) {  // a form (STS), on a connection of its own
      m_api->curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      m_api->curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.data());
    }
    Transfer& t = c->transfer;
    t = Transfer{};
    t.max_bytes = limit;
    t.upload = body;
    c->error[0] = 0;
    // Silence is measured from the end of the connect budget (libcurl bounds the connect and
    // TLS handshake itself), then from the last byte that moved either way.
    auto start = Clock::now();
    t.last_activity = start + m_options.connect_timeout;
    m_api->curl_multi_add_handle(c->multi, e);
    CURLcode result = CURLE_OK;
    bool silent = false;
    for (;;) {
      int running = 0;
      CURLMcode mc = m_api->curl_multi_perform(c->multi, &running);
      if (mc != CURLM_OK) {
        m_api->curl_multi_remove_handle(c->multi, e);
        std::string why = m_api->curl_multi_strerror(mc);
        close(*c);
        return unavailable(label() + ": " + method + " " + path + ": " + why);
      }
      if (!running) break;
      auto idle_end = t.last_activity + m_options.io_timeout;
      auto now = Clock::now();
      if (now >= idle_end) {
        silent = true;
        break;
      }
      int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(idle_end - now).count()) + 1;
      m_api->curl_multi_poll(c->multi, nullptr, 0, std::min(wait_ms, 1000), nullptr);
    }
    if (!silent) {
      int left = 0;
      while (CURLMsg* msg = m_api->curl_multi_info_read(c->multi, &left))
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) result = msg->data.result;
    }
    // Removed before its end, a transfer's connection is closed, not kept for the next one.
    m_api->curl_multi_remove_handle(c->multi, e);
    Response r;
    std::string failure;
    if (silent) {
      failure = "timed out: no answer for " + std::to_string(m_options.io_timeout.count()) + " ms";
    } else if (t.too_large) {
      failure = "an answer of more than " + std::to_string(limit) +
                " bytes, the most it may hold (refused before it was kept)";
    } else if (t.out_of_memory) {
      failure = "out of memory after " + std::to_string(t.body.size()) + " bytes of the answer";
    } else if (result != CURLE_OK) {
      failure = explain(result, *c);
    } else {
      m_api->curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
      r.body = std::move(t.body);
    }
    t = Transfer{};  // the body went to the caller; nothing of the request stays
    if (whole_url) {
      close(*c);
    } else {
      std::lock_guard lock(m_mutex);
      m_idle.push_back(std::move(c));
    }
    if (!failure.empty()) return unavailable(label() + ": " + method + " " + (whole_url ? path.substr(0, path.find('?')) : path) + ": " + failure);
    KILN_LOG_AT(kDebug, "remote",
                label() + ": " + method + " " + path + " answered " + std::to_string(r.status) + " in " +
                    std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - start).count()) + " ms");
    return r;
  }

  EndpointOptions m_options;
  bool m_s3 = false;
  std::string m_scheme;  // of the server: http or https
  std::string m_folder;  // the path objects go under: /prefix/ (/bucket/prefix/ on S3 with path style)
  std::string m_region, m_sigv4;
  std::unique_ptr<S3CredentialSource> m_credentials;
  std::string m_signed_with;  // where the last credentials came from, for messages
  std::string m_signed_key;   // and their access key id (not a secret)
  std::string m_base;  // scheme://host:port
  mutable std::mutex m_mutex;
  const CurlApi* m_api = nullptr;  // set once by prepare()
  std::string m_api_version;
  ShareLocks m_share_locks;
  CURLSH* m_share = nullptr;
  std::vector<std::unique_ptr<Connection>> m_idle;
};

}  // namespace

Result<std::unique_ptr<RemoteEndpoint>> make_http_endpoint(const EndpointUrl& url, const EndpointOptions& options) {
  if (options.layout != "flat" && options.layout != "subdirs" && options.layout != "bazel")
    return invalid_argument("remote '" + url.text + "': unknown layout '" + options.layout +
                            "' (flat, subdirs or bazel)");
  if (url.scheme == "s3") {
    std::string region = options.s3_region.empty() ? s3_default_region() : options.s3_region;
    std::string server_text = options.s3_endpoint.empty() ? "https://s3." + region + ".amazonaws.com" : options.s3_endpoint;
    KILN_ASSIGN_OR_RETURN(EndpointUrl server, parse_endpoint_url(server_text));
    return std::unique_ptr<RemoteEndpoint>(new HttpEndpoint(url, options, server));
  }
  return std::unique_ptr<RemoteEndpoint>(new HttpEndpoint(url, options));
}

#else  // built without libcurl's headers

Result<std::unique_ptr<RemoteEndpoint>> make_http_endpoint(const EndpointUrl& url, const EndpointOptions&) {
  return unavailable("remote '" + url.text +
                     "': this kiln was built without libcurl's headers, so it has no HTTP tiers "
                     "(install libcurl4-openssl-dev and build again)");
}

#endif

}  // namespace kiln::cache
