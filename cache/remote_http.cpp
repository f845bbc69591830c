// An HTTP object store: GET, PUT and HEAD of one object per name over HTTP/1.1 with
// keep-alive, the protocol of ccache's HTTP storage, bazel-remote and an nginx WebDAV share.
// Written on plain sockets rather than libcurl: every wait is a poll() bounded by the
// timeouts, and a process that never misses never maps an HTTP library.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "cache/remote_endpoint.h"

namespace kiln::cache {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t k_max_header_bytes = 64 << 10;
constexpr uint64_t k_max_body_bytes = uint64_t{2} << 30;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

// Waits for `events` on `fd` until the earlier of `idle` from now and `deadline`.
Status wait_for(int fd, short events, std::chrono::milliseconds idle, Clock::time_point deadline, const std::string& what) {
  int timeout = std::min<int>(static_cast<int>(idle.count()), remaining_ms(deadline));
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, timeout);
    if (n > 0) return {};
    if (n == 0) return unavailable(what + ": timed out after " + std::to_string(timeout) + " ms");
    if (errno != EINTR) return errno_status(what, errno);
  }
}

struct Response {
  int status = 0;
  std::string body;
  bool keep_alive = true;
};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

class HttpEndpoint final : public RemoteEndpoint {
 public:
  HttpEndpoint(EndpointUrl url, EndpointOptions options) : RemoteEndpoint(std::move(url)), m_options(std::move(options)) {}
  ~HttpEndpoint() override {
    for (int fd : m_idle) ::close(fd);
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
  std::string object_path(const std::string& name) const {
    if (m_options.layout == "subdirs" && name.size() > 2) return m_url.path + name.substr(0, 2) + "/" + name.substr(2);
    if (m_options.layout == "bazel") return m_url.path + "ac/" + name;
    return m_url.path + name;
  }

  Status refused(const char* method, const std::string& name, int status) const {
    std::string hint;
    if (status == 401 || status == 403) hint = " (check the tier's token-file or basic-auth-file)";
    if (status == 405 || status == 501)
      hint = std::string(" (the server does not take ") + method + ": for nginx, dav_methods PUT; create_full_put_path on;)";
    if (status == 409) hint = " (a folder on the way is missing: for nginx, create_full_put_path on;)";
    if (status == 400 && m_options.layout == "bazel")
      hint = " (bazel-remote checks /ac/ entries are ActionResults: start it with --disable_http_ac_validation)";
    return unavailable(label() + ": " + method + " " + object_path(name) + " answered HTTP " + std::to_string(status) + hint);
  }

  Result<int> connect_new(Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    std::string port = std::to_string(m_url.port);
    if (int rc = ::getaddrinfo(m_url.host.c_str(), port.c_str(), &hints, &found); rc != 0)
      return unavailable(label() + ": cannot resolve " + m_url.host + ": " + gai_strerror(rc));
    Status last = unavailable(label() + ": no address");
    int fd = -1;
    for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        Status st = errno == EINPROGRESS ? wait_for(fd, POLLOUT, m_options.connect_timeout, deadline, label() + ": connect")
                                         : errno_status(label() + ": connect", errno);
        int err = 0;
        socklen_t len = sizeof err;
        if (st.ok() && (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0))
          st = errno_status(label() + ": connect", err ? err : errno);
        if (!st.ok()) {
          last = st;
          ::close(fd);
          fd = -1;
        }
      }
    }
    ::freeaddrinfo(found);
    if (fd < 0) return last;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }

  Status send_all(int fd, std::string_view data, Clock::time_point deadline) {
    while (!data.empty()) {
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        KILN_RETURN_IF_ERROR(wait_for(fd, POLLOUT, m_options.io_timeout, deadline, label() + ": send"));
        continue;
      }
      m_last_errno = errno;
      return errno_status(label() + ": send", errno);
    }
    return {};
  }

  // Appends what arrives to `buf`; 0 bytes means the server closed the connection.
  Result<size_t> receive(int fd, std::string& buf, Clock::time_point deadline) {
    char chunk[64 << 10];
    for (;;) {
      ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n >= 0) {
        buf.append(chunk, static_cast<size_t>(n));
        return static_cast<size_t>(n);
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        m_last_errno = errno;
        return errno_status(label() + ": receive", errno);
      }
      KILN_RETURN_IF_ERROR(wait_for(fd, POLLIN, m_options.io_timeout, deadline, label() + ": waiting for an answer"));
    }
  }

  // Reads one response. `closed_unanswered` says the server closed the connection (or reset
  // it) before a byte of the answer: on a kept connection the server had since closed, the
  // request is worth one retry on a new one (a timeout is not: it would double the wait).
  Result<Response> read_response(int fd, const std::string& method, Clock::time_point deadline, bool& closed_unanswered) {
    std::string buf;
    size_t header_end;
    while ((header_end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (buf.size() > k_max_header_bytes) return unavailable(label() + ": an answer's header is over 64 KiB");
      auto n = receive(fd, buf, deadline);
      if (buf.empty() && ((n.ok() && n.value() == 0) || (!n.ok() && m_last_errno == ECONNRESET))) closed_unanswered = true;
      if (!n.ok()) return n.status();
      if (n.value() == 0) return unavailable(label() + ": the server closed the connection" + (buf.empty() ? "" : " in the middle of a header"));
    }
    Response r;
    std::string_view head(buf.data(), header_end);
    size_t line_end = head.find("\r\n");
    std::string_view status_line = head.substr(0, line_end);
    if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1.")
      return unavailable(label() + ": not an HTTP answer: '" + std::string(status_line.substr(0, 40)) + "'");
    r.status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
    if (r.status < 100 || r.status > 599) return unavailable(label() + ": bad HTTP status line '" + std::string(status_line) + "'");
    if (status_line.substr(5, 3) == "1.0") r.keep_alive = false;
    bool chunked = false, has_length = false;
    uint64_t length = 0;
    std::string_view rest = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
    while (!rest.empty()) {
      size_t e = rest.find("\r\n");
      std::string_view line = rest.substr(0, e);
      rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 2);
      size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = line.substr(0, colon), value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      if (iequals(name, "content-length")) {
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
        if (ec != std::errc() || end != value.data() + value.size()) return unavailable(label() + ": bad Content-Length");
        has_length = true;
      } else if (iequals(name, "transfer-encoding")) {
        chunked = value.find("chunked") != std::string_view::npos;
      } else if (iequals(name, "connection")) {
        if (iequals(value, "close")) r.keep_alive = false;
      }
    }
    std::string body = buf.substr(header_end + 4);
    const bool no_body = method == "HEAD" || r.status == 204 || r.status == 304 || r.status < 200;
    if (no_body) {
      if (!body.empty()) r.keep_alive = false;
      return r;
    }
    if (chunked) {
      KILN_RETURN_IF_ERROR(read_chunked(fd, body, r.body, deadline));
    } else if (has_length) {
      if (length > k_max_body_bytes) return unavailable(label() + ": an answer of " + std::to_string(length) + " bytes is too large");
      body.reserve(length);
      while (body.size() < length) {
        KILN_ASSIGN_OR_RETURN(size_t n, receive(fd, body, deadline));
        if (n == 0)
          return unavailable(label() + ": the answer was cut short at " + std::to_string(body.size()) + " of " + std::to_string(length) +
                             " bytes");
      }
      if (body.size() > length) r.keep_alive = false;  // more than announced: do not trust what follows
      body.resize(length);
      r.body = std::move(body);
    } else {  // the body runs to the end of the connection
      r.keep_alive = false;
      for (;;) {
        KILN_ASSIGN_OR_RETURN(size_t n, receive(fd, body, deadline));
        if (n == 0) break;
        if (body.size() > k_max_body_bytes) return unavailable(label() + ": an answer is too large");
      }
      r.body = std::move(body);
    }
    return r;
  }

  Status read_chunked(int fd, std::string& buf, std::string& out, Clock::time_point deadline) {
    size_t pos = 0;
    auto need = [&](size_t bytes) -> Status {
      while (buf.size() < pos + bytes) {
        KILN_ASSIGN_OR_RETURN(size_t n, receive(fd, buf, deadline));
        if (n == 0) return unavailable(label() + ": the answer was cut short in a chunk");
      }
      return {};
    };
    for (;;) {
      size_t eol;
      while ((eol = buf.find("\r\n", pos)) == std::string::npos) {
        if (buf.size() - pos > 1024) return unavailable(label() + ": a bad chunk header");
        KILN_RETURN_IF_ERROR(need(buf.size() - pos + 1));
      }
      uint64_t size = 0;
      auto [end, ec] = std::from_chars(buf.data() + pos, buf.data() + eol, size, 16);
      if (ec != std::errc() || end == buf.data() + pos) return unavailable(label() + ": a bad chunk size");
      if (out.size() + size > k_max_body_bytes) return unavailable(label() + ": an answer is too large");
      pos = eol + 2;
      if (size == 0) {  // trailers end with an empty line
        while (buf.find("\r\n", pos) == std::string::npos) KILN_RETURN_IF_ERROR(need(buf.size() - pos + 2));
        return {};
      }
      KILN_RETURN_IF_ERROR(need(size + 2));
      out.append(buf, pos, size);
      pos += size + 2;
    }
  }

  Result<Response> request(const std::string& method, const std::string& path, std::string_view body) {
    // No request may outlast ten silences: a server trickling bytes still ends.
    Clock::time_point deadline = Clock::now() + m_options.connect_timeout + 10 * m_options.io_timeout;
    std::string head = method + " " + path + " HTTP/1.1\r\nHost: " + m_url.host + ":" + std::to_string(m_url.port) +
                       "\r\nUser-Agent: kiln\r\n";
    if (!m_options.authorization.empty()) head += "Authorization: " + m_options.authorization + "\r\n";
    if (method == "PUT") head += "Content-Type: application/octet-stream\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    head += "\r\n";
    for (int attempt = 0;; ++attempt) {
      int fd = -1;
      bool reused = false;
      {
        std::lock_guard lock(m_mutex);
        if (!m_idle.empty()) {
          fd = m_idle.back();
          m_idle.pop_back();
          reused = true;
        }
      }
      if (fd < 0) {
        KILN_ASSIGN_OR_RETURN(fd, connect_new(deadline));
      }
      bool closed_unanswered = false;
      m_last_errno = 0;
      Status sent = send_all(fd, head, deadline);
      if (sent.ok() && !body.empty()) sent = send_all(fd, body, deadline);
      if (!sent.ok() && (m_last_errno == EPIPE || m_last_errno == ECONNRESET)) closed_unanswered = true;
      Result<Response> r = sent.ok() ? read_response(fd, method, deadline, closed_unanswered) : Result<Response>(sent);
      if (r.ok() && r->keep_alive) {
        std::lock_guard lock(m_mutex);
        m_idle.push_back(fd);
      } else {
        ::close(fd);
      }
      // A kept connection the server has since closed: once more on a new one.
      if (!r.ok() && reused && closed_unanswered && attempt == 0) continue;
      return r;
    }
  }

  EndpointOptions m_options;
  std::mutex m_mutex;
  std::vector<int> m_idle;
  // The errno of this thread's last failed send or receive (why a request failed).
  static thread_local int m_last_errno;
};

thread_local int HttpEndpoint::m_last_errno = 0;

}  // namespace

Result<std::unique_ptr<RemoteEndpoint>> make_http_endpoint(const EndpointUrl& url, const EndpointOptions& options) {
  if (options.layout != "flat" && options.layout != "subdirs" && options.layout != "bazel")
    return invalid_argument("remote '" + url.text + "': unknown layout '" + options.layout + "' (flat, subdirs or bazel)");
  return std::unique_ptr<RemoteEndpoint>(new HttpEndpoint(url, options));
}

}  // namespace kiln::cache
