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
#include <vector>

#include "cache/remote_endpoint.h"
#include "support/log.h"

#if KILN_WITH_CURL
#include "cache/curl_api.h"
#endif

namespace kiln::cache {

#if KILN_WITH_CURL
namespace {

using Clock = std::chrono::steady_clock;

// The largest answer taken: a remote that sends more is misbehaving, not serving an artifact.
constexpr size_t k_max_body_bytes = size_t{2} << 30;
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

struct Response {
  long status = 0;
  std::string body;
};

// What the callbacks of one request see.
struct Transfer {
  std::string body;
  bool too_large = false;
  std::string_view upload;
  size_t sent = 0;
  Clock::time_point last_activity;
};

size_t on_write(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  if (t->body.size() + n > k_max_body_bytes) {
    t->too_large = true;
    return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
  }
  t->body.append(data, n);
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
    if (length > k_max_body_bytes) {
      t->too_large = true;
      return 0;
    }
    t->body.clear();  // a redirect's body, if any, is not the answer
    t->body.reserve(static_cast<size_t>(length));
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
  HttpEndpoint(EndpointUrl url, EndpointOptions options)
      : RemoteEndpoint(std::move(url)), m_options(std::move(options)) {
    std::string host = m_url.host.find(':') != std::string::npos ? "[" + m_url.host + "]" : m_url.host;
    m_base = m_url.scheme + "://" + host + ":" + std::to_string(m_url.port);
  }
  ~HttpEndpoint() override {
    if (!m_api) return;
    for (auto& c : m_idle) close(*c);
    if (m_share) m_api->curl_share_cleanup(m_share);
  }

  Result<std::optional<std::string>> get(const std::string& name) override {
    KILN_ASSIGN_OR_RETURN(Response r, request("GET", object_path(name), {}));
    if (r.status == 200) return std::optional<std::string>(std::move(r.body));
    if (r.status == 404) return std::optional<std::string>();
    return refused("GET", name, r.status);
  }

  Status put(const std::string& name, std::string_view bytes) override {
    KILN_ASSIGN_OR_RETURN(Response r, request("PUT", object_path(name), bytes));
    if (r.status >= 200 && r.status < 300) return {};
    return refused("PUT", name, r.status);
  }

  Status ping() override {
    // HEAD of an object no one stores: a store that answers says 404 (or 200).
    KILN_ASSIGN_OR_RETURN(Response r, request("HEAD", object_path(std::string(64, '0')), {}));
    if (r.status == 200 || r.status == 404) return {};
    return refused("HEAD", std::string(64, '0'), r.status);
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
    if (m_options.layout == "subdirs" && name.size() > 2) return m_url.path + name.substr(0, 2) + "/" + name.substr(2);
    if (m_options.layout == "bazel") return m_url.path + "ac/" + name;
    return m_url.path + name;
  }

  Status refused(const char* method, const std::string& name, long status) const {
    std::string hint;
    if (status == 401 || status == 403)
      hint = " (the server refused the credentials: check the tier's token-file or basic-auth-file" +
             std::string(m_url.scheme == "https" ? ", and remote.cert_file if it asks for a client certificate)" : ")");
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

  // The proxy libcurl takes from the environment for this scheme, as "NAME=value", or "" (it
  // skips it for the hosts NO_PROXY lists; this does not look).
  std::string proxy_variable() const {
    std::vector<const char*> names{"http_proxy"};  // libcurl reads no HTTP_PROXY: a CGI's request could set it
    if (m_url.scheme == "https") names = {"https_proxy", "HTTPS_PROXY"};
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
        return what + (m_url.scheme == "https" ? " (the server redirected to http://: an https:// tier never follows a redirect "
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
    const char* protocols = m_url.scheme == "https" ? "https" : "http,https";  // never from https down to http
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
    // second where a server ignores Expect.
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
    if (m_url.scheme == "https" && !(api->curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_SSL))
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

  Result<Response> request(const char* method, const std::string& path, std::string_view body) {
    if (Status st = prepare(); !st.ok()) return unavailable(label() + ": " + st.message());
    std::unique_ptr<Connection> c;
    {
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
    std::string url = m_base + path;
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
    Transfer& t = c->transfer;
    t = Transfer{};
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
      failure =
          "an answer over " + std::to_string(k_max_body_bytes >> 30) + " GiB (the server is not serving kiln objects)";
    } else if (result != CURLE_OK) {
      failure = explain(result, *c);
    } else {
      m_api->curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
      r.body = std::move(t.body);
    }
    t = Transfer{};  // the body went to the caller; nothing of the request stays
    {
      std::lock_guard lock(m_mutex);
      m_idle.push_back(std::move(c));
    }
    if (!failure.empty()) return unavailable(label() + ": " + method + " " + path + ": " + failure);
    KILN_LOG_AT(kDebug, "remote",
                label() + ": " + method + " " + path + " answered " + std::to_string(r.status) + " in " +
                    std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - start).count()) + " ms");
    return r;
  }

  EndpointOptions m_options;
  std::string m_base;  // scheme://host:port
  std::mutex m_mutex;
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
