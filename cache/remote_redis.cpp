// A Redis server through hiredis: GET and SET of one value per name under a prefix, and
// leases as keys set only if absent (SET NX PX), renewed and released by their holder alone
// (a compare-and-set in a Lua script, so a lease that expired and was taken over is never
// extended or deleted by its old holder). The release also PUBLISHes on a channel named as the
// lease's key, which its waiters SUBSCRIBE to: they wait on a socket, not in a polling loop.
//
// hiredis connects, authenticates and sends every command but GET, whose reply kiln reads
// itself (read_value below): the value goes from the socket into a string of its length, once.
#include "cache/remote_endpoint.h"

#if KILN_WITH_HIREDIS
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

namespace kiln::cache {
namespace {

constexpr const char* k_renew_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
// Deleted, then said on the lease's channel (one script: atomic, and one round trip).
constexpr const char* k_release_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); redis.call('publish', KEYS[1], 'released'); "
    "return 1 else return 0 end";

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

struct Reply {
  redisReply* r = nullptr;
  ~Reply() {
    if (r) freeReplyObject(r);
  }
};

// The first line of a GET's reply is read into a buffer of this size, with as much of the value
// as arrives with it (then copied once into place): a manifest (a few KiB), a miss or an error
// is one recv. Redis's own largest bulk string (proto-max-bulk-len) bounds what a length may say,
// so a garbled length never allocates more.
constexpr size_t k_reply_head_bytes = 16 << 10;
constexpr uint64_t k_max_value_bytes = uint64_t{512} << 20;

// At most `n` bytes of what a server sent, for a message: bytes that are not printable as \xNN.
std::string shown(std::string_view bytes, size_t n = 40) {
  std::string out;
  for (unsigned char c : bytes.substr(0, n)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char esc[5];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    }
  }
  return out;
}

// "*2\r\n$3\r\nGET\r\n$<n>\r\n<key>\r\n", what hiredis's formatter would send.
std::string get_command(std::string_view key) {
  std::string out = "*2\r\n$3\r\nGET\r\n$" + std::to_string(key.size()) + "\r\n";
  out.append(key);
  out += "\r\n";
  return out;
}

// A connection in subscribe mode: it only ever receives. What arrives is read with hiredis's
// reader, after poll() says there is something, so a quiet channel never times the socket out.
class RedisLeaseWatch final : public RemoteEndpoint::LeaseWatch {
 public:
  RedisLeaseWatch(redisContext* c, std::string label) : m_c(c), m_label(std::move(label)) {}
  ~RedisLeaseWatch() override { redisFree(m_c); }

  Result<bool> wait(std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      void* reply = nullptr;
      if (redisReaderGetReply(m_c->reader, &reply) != REDIS_OK) return unavailable(m_label + ": the lease channel broke");
      if (reply) {
        auto* r = static_cast<redisReply*>(reply);
        bool message = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING &&
                       std::string_view(r->element[0]->str, r->element[0]->len) == "message";
        freeReplyObject(reply);
        if (message) return true;
        continue;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{m_c->fd, POLLIN, 0};
      int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return unavailable(m_label + ": the lease channel broke: " + std::strerror(errno));
      if (n == 0) return false;
      if (redisBufferRead(m_c) != REDIS_OK) return unavailable(m_label + ": the lease channel closed: " + m_c->errstr);
    }
  }

 private:
  redisContext* m_c;
  std::string m_label;
};

class RedisEndpoint final : public RemoteEndpoint {
 public:
  RedisEndpoint(EndpointUrl url, EndpointOptions options) : RemoteEndpoint(std::move(url)), m_options(std::move(options)) {}
  ~RedisEndpoint() override {
    for (auto* c : m_idle) redisFree(c);
  }

  Result<std::optional<std::string>> get(const std::string& name) override {
    std::string command = get_command(m_options.prefix + name);
    std::optional<std::string> value;
    KILN_RETURN_IF_ERROR(on_connection([&](redisContext* c, bool& closed) {
      // A connection is kept only after a whole reply, so neither of hiredis's buffers holds
      // anything; were one to, this reader would lose its place in the stream.
      if (c->reader->pos < c->reader->len) return unavailable(label() + ": a kept connection holds an unread reply");
      value.reset();
      KILN_RETURN_IF_ERROR(send_all(c->fd, command, closed));
      return read_value(c->fd, value, closed);
    }));
    return value;
  }

  Status put(const std::string& name, std::string_view bytes) override {
    std::string key = m_options.prefix + name;
    Reply reply;
    KILN_RETURN_IF_ERROR(command({"SET", key, bytes}, reply));
    if (reply.r->type != REDIS_REPLY_STATUS) return unexpected("SET", reply.r);
    return {};
  }

  Status ping() override {
    Reply reply;
    KILN_RETURN_IF_ERROR(command({"PING"}, reply));
    if (reply.r->type != REDIS_REPLY_STATUS) return unexpected("PING", reply.r);
    return {};
  }

  bool has_leases() const override { return true; }

  Result<bool> take_lease(const std::string& name, const std::string& holder, std::chrono::milliseconds ttl) override {
    Reply reply;
    std::string key = m_options.prefix + name, ms = std::to_string(ttl.count());
    KILN_RETURN_IF_ERROR(command({"SET", key, holder, "NX", "PX", ms}, reply));
    if (reply.r->type == REDIS_REPLY_NIL) return false;
    if (reply.r->type != REDIS_REPLY_STATUS) return unexpected("SET NX", reply.r);
    return true;
  }

  Result<bool> renew_lease(const std::string& name, const std::string& holder, std::chrono::milliseconds ttl) override {
    Reply reply;
    std::string key = m_options.prefix + name, ms = std::to_string(ttl.count());
    KILN_RETURN_IF_ERROR(command({"EVAL", k_renew_script, "1", key, holder, ms}, reply));
    if (reply.r->type != REDIS_REPLY_INTEGER) return unexpected("EVAL", reply.r);
    return reply.r->integer == 1;
  }

  Status release_lease(const std::string& name, const std::string& holder) override {
    Reply reply;
    std::string key = m_options.prefix + name;
    KILN_RETURN_IF_ERROR(command({"EVAL", k_release_script, "1", key, holder}, reply));
    if (reply.r->type != REDIS_REPLY_INTEGER) return unexpected("EVAL", reply.r);
    return {};
  }

  Result<std::unique_ptr<LeaseWatch>> watch_lease(const std::string& name) override {
    KILN_ASSIGN_OR_RETURN(redisContext * c, connect());
    Reply reply;
    std::string key = m_options.prefix + name;
    Status st = send(c, {"SUBSCRIBE", key}, reply);
    if (st.ok() && reply.r->type != REDIS_REPLY_ARRAY) st = unexpected("SUBSCRIBE", reply.r);
    if (!st.ok()) {
      redisFree(c);
      return st;
    }
    return std::unique_ptr<LeaseWatch>(new RedisLeaseWatch(c, label()));
  }

  Result<int64_t> lease_watchers(const std::string& name) override {
    Reply reply;
    KILN_RETURN_IF_ERROR(command({"PUBSUB", "NUMSUB", m_options.prefix + name}, reply));
    if (reply.r->type != REDIS_REPLY_ARRAY || reply.r->elements != 2 || reply.r->element[1]->type != REDIS_REPLY_INTEGER)
      return unexpected("PUBSUB NUMSUB", reply.r);
    return static_cast<int64_t>(reply.r->element[1]->integer);
  }

 private:
  Status unexpected(const char* what, const redisReply* r) const {
    if (r->type == REDIS_REPLY_ERROR) return unavailable(label() + ": " + what + " failed: " + std::string(r->str, r->len));
    return unavailable(label() + ": " + what + " answered something unexpected (reply type " + std::to_string(r->type) + ")");
  }

  Result<redisContext*> connect() {
    redisContext* c = redisConnectWithTimeout(m_url.host.c_str(), m_url.port, to_timeval(m_options.connect_timeout));
    if (!c) return unavailable(label() + ": cannot allocate a connection");
    if (c->err) {
      Status st = unavailable(label() + ": cannot connect: " + c->errstr);
      redisFree(c);
      return st;
    }
    redisSetTimeout(c, to_timeval(m_options.io_timeout));
    auto setup = [&](std::vector<std::string_view> args, const char* what) -> Status {
      Reply reply;
      KILN_RETURN_IF_ERROR(send(c, args, reply));
      if (reply.r->type == REDIS_REPLY_ERROR) return unavailable(label() + ": " + what + " failed: " + std::string(reply.r->str, reply.r->len));
      return {};
    };
    Status st;
    if (!m_options.password.empty()) st = setup({"AUTH", m_options.password}, "AUTH");
    if (st.ok() && m_url.db) st = setup({"SELECT", std::to_string(m_url.db)}, "SELECT");
    if (!st.ok()) {
      redisFree(c);
      return st;
    }
    return c;
  }

  Status send(redisContext* c, const std::vector<std::string_view>& args, Reply& reply) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    reply.r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (!reply.r) return unavailable(label() + ": " + (c->err ? std::string(c->errstr) : std::string("no answer")));
    return {};
  }

  // `run(c, closed)` on an idle connection (or a new one); `closed` says a failure was the
  // server closing it. A connection that failed is freed: neither hiredis nor read_value can
  // resynchronise a stream that broke mid-reply.
  template <typename Run>
  Status on_connection(Run&& run) {
    for (int attempt = 0;; ++attempt) {
      redisContext* c = nullptr;
      bool reused = false;
      {
        std::lock_guard lock(m_mutex);
        if (!m_idle.empty()) {
          c = m_idle.back();
          m_idle.pop_back();
          reused = true;
        }
      }
      if (!c) {
        KILN_ASSIGN_OR_RETURN(c, connect());
      }
      bool closed = false;
      Status st = run(c, closed);
      if (st.ok()) {
        std::lock_guard lock(m_mutex);
        m_idle.push_back(c);
        return {};
      }
      redisFree(c);
      // A kept connection the server closed (a restart) is worth once more on a new one; a
      // timeout is not (it would double the wait).
      if (reused && closed && attempt == 0) continue;
      return st;
    }
  }

  // One command through hiredis.
  Status command(const std::vector<std::string_view>& args, Reply& reply) {
    return on_connection([&](redisContext* c, bool& closed) {
      Status st = send(c, args, reply);
      closed =
          !st.ok() && (c->err == REDIS_ERR_EOF || (c->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE)));
      return st;
    });
  }

  // Why a recv or send on a connection failed (`where`: "before answering GET", ...): the server
  // closed or reset it (`closed`), stayed silent past remote.timeout (the socket's SO_RCVTIMEO,
  // which hiredis set), or another error.
  Status socket_failure(ssize_t n, int err, const std::string& where, bool& closed) const {
    closed = n == 0 || err == ECONNRESET || err == EPIPE;
    if (n == 0) return unavailable(label() + ": the server closed the connection " + where);
    if (err == ECONNRESET || err == EPIPE) return unavailable(label() + ": the server reset the connection " + where);
    if (err == EAGAIN || err == EWOULDBLOCK)
      return unavailable(label() + ": timed out " + where + ": nothing came for " +
                         std::to_string(m_options.io_timeout.count()) + " ms (remote.timeout)");
    return unavailable(label() + ": " + std::strerror(err) + " " + where);
  }

  Status send_all(int fd, std::string_view bytes, bool& closed) const {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return socket_failure(n, errno, "while kiln sent a command", closed);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return {};
  }

  // Fills out[0, n): first with what already arrived (taken from `rest`), then from the socket;
  // `where(got)` says where in the reply a failure came.
  template <typename Where>
  Status receive(int fd, char* out, size_t n, std::string_view& rest, bool& closed, Where&& where) const {
    size_t got = std::min(rest.size(), n);
    std::memcpy(out, rest.data(), got);
    rest.remove_prefix(got);
    while (got < n) {
      ssize_t r = ::recv(fd, out + got, n - got, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return socket_failure(r, errno, where(got), closed);
      got += static_cast<size_t>(r);
    }
    return {};
  }

  // Reads a GET's reply: "$<length>\r\n<value>\r\n", "$-1\r\n" (no such key: nullopt) or an
  // error ("-..."). The value is received into a string of its length, straight from the socket
  // but for what arrived with the first line. Anything that breaks the protocol (a reply cut
  // short, a length its value does not match, more than one reply) is an error, never data.
  Status read_value(int fd, std::optional<std::string>& value, bool& closed) const {
    char head[k_reply_head_bytes];
    size_t have = 0, line_end = 0;
    for (;;) {  // the first line
      if (const void* cr = have > 1 ? ::memmem(head, have, "\r\n", 2) : nullptr) {
        line_end = static_cast<size_t>(static_cast<const char*>(cr) - head);
        break;
      }
      if (have == sizeof head)
        return unavailable(label() + ": GET answered a line of more than " + std::to_string(sizeof head) + " bytes");
      ssize_t n = ::recv(fd, head + have, sizeof head - have, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return socket_failure(n, errno, "before answering GET", closed);
      have += static_cast<size_t>(n);
    }
    std::string_view line(head, line_end), rest(head + line_end + 2, have - line_end - 2);
    if (line.empty() || (line[0] != '$' && line[0] != '-'))
      return unavailable(label() + ": GET answered something unexpected (a reply starting \"" + shown(line, 16) +
                         "\")");
    if (line[0] == '-') return unavailable(label() + ": GET failed: " + shown(line.substr(1), 200));
    if (line == "$-1") {
      if (!rest.empty()) return unavailable(label() + ": GET answered more than one reply");
      return {};
    }
    uint64_t length = 0;
    std::string_view digits = line.substr(1);
    if (digits.empty() || digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string_view::npos)
      return unavailable(label() + ": GET answered a malformed length \"" + shown(digits, 16) + "\"");
    for (char d : digits) length = length * 10 + static_cast<uint64_t>(d - '0');
    if (length > k_max_value_bytes)
      return unavailable(label() + ": GET answered a length of " + std::to_string(length) +
                         " bytes, more than Redis can hold");
    std::string out(length, '\0');
    KILN_RETURN_IF_ERROR(receive(fd, out.data(), length, rest, closed, [&](size_t got) {
      return "after " + std::to_string(got) + " of the value's " + std::to_string(length) + " bytes";
    }));
    char end[2];
    KILN_RETURN_IF_ERROR(receive(fd, end, 2, rest, closed, [&](size_t) {
      return "before the end of the value's " + std::to_string(length) + " bytes";
    }));
    if (end[0] != '\r' || end[1] != '\n')
      return unavailable(label() + ": GET's value does not end where its length (" + std::to_string(length) +
                         " bytes) says");
    if (!rest.empty()) return unavailable(label() + ": GET answered more than one reply");
    value = std::move(out);
    return {};
  }

  EndpointOptions m_options;
  std::mutex m_mutex;
  std::vector<redisContext*> m_idle;
};

}  // namespace

Result<std::unique_ptr<RemoteEndpoint>> make_redis_endpoint(const EndpointUrl& url, const EndpointOptions& options) {
  return std::unique_ptr<RemoteEndpoint>(new RedisEndpoint(url, options));
}

}  // namespace kiln::cache

#else

namespace kiln::cache {

Result<std::unique_ptr<RemoteEndpoint>> make_redis_endpoint(const EndpointUrl& url, const EndpointOptions&) {
  return unavailable("remote '" + url.text + "': this kiln was built without hiredis (install libhiredis-dev and rebuild)");
}

}  // namespace kiln::cache

#endif  // KILN_WITH_HIREDIS
