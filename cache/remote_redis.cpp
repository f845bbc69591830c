// A Redis server: GET and SET of one value per name under a prefix, and leases as keys set
// only if absent (SET NX PX), renewed and released by their holder alone (a compare-and-set in a
// Lua script, so a lease that expired and was taken over is never extended or deleted by its
// old holder). The release also PUBLISHes on a channel named as the lease's key, which its
// waiters SUBSCRIBE to: they wait on a socket, not in a polling loop.
//
// hiredis connects (names, timeouts); kiln sends the commands and reads every reply itself, so
// that what a server says is bounded before anything is kept: a GET's value by
// EndpointOptions::max_object_bytes, received into a string that grows as its bytes arrive (a
// declared length is never allocated up front), every other reply by a few KiB and a few
// elements (kiln's other commands answer "+OK", an integer or a short array). hiredis's own
// reader would allocate an array's declared count before its elements came.
//
// Credentials: AUTH [user] password on each new connection (Redis 6+ ACL users). A reply that
// refuses them (-NOPERM for a command or key the user's ACL does not allow, -WRONGPASS, -NOAUTH)
// is kPermissionDenied naming the user and the command, apart from a server that is down.
#include "cache/remote_endpoint.h"

#if KILN_WITH_HIREDIS
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "support/log.h"

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

// The first line of a GET's reply is read into a buffer of this size, with as much of the value
// as arrives with it (then copied once into place): a manifest (a few KiB), a miss or an error
// is one recv.
constexpr size_t k_reply_head_bytes = 16 << 10;
// Every reply but a GET's: "+OK", an integer, a nil, an error line, or an array of a few short
// strings (SUBSCRIBE's confirmation, a channel's message, PUBSUB NUMSUB's pair).
constexpr size_t k_max_command_reply_bytes = 64 << 10;
constexpr size_t k_max_reply_elements = 16;
constexpr int k_max_reply_depth = 4;

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
  if (bytes.size() > n) out += "...";
  return out;
}

// A command as the protocol sends it: "*<n>\r\n" then "$<length>\r\n<argument>\r\n" each.
std::string format_command(const std::vector<std::string_view>& args) {
  size_t n = 16;
  for (auto a : args) n += a.size() + 16;
  std::string out;
  out.reserve(n);
  out += "*" + std::to_string(args.size()) + "\r\n";
  for (auto a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out.append(a);
    out += "\r\n";
  }
  return out;
}

// The decimal digits of a length or count ("-1" is the caller's), or nullopt when they are not
// one, or say more than 18 digits can.
std::optional<uint64_t> parse_count(std::string_view digits) {
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  uint64_t n = 0;
  for (char d : digits) n = n * 10 + static_cast<uint64_t>(d - '0');
  return n;
}

// One reply of the protocol (RESP2, what kiln's connections speak).
struct RespReply {
  char type = 0;  // '+' status, '-' error, ':' integer, '$' bulk string, '*' array, 'n' nil ($-1, *-1)
  std::string str;
  int64_t integer = 0;
  std::vector<RespReply> elements;
  std::string_view text() const { return str; }
};

enum class Parsed { kIncomplete, kDone, kMalformed };

// Parses one whole reply at bytes[pos...]: kDone moves `pos` past it; kIncomplete wants more
// bytes; kMalformed says why. Every declared length and count is checked against the caps
// before anything is allocated for it.
Parsed parse_reply(std::string_view bytes, size_t& pos, RespReply& out, std::string& why, int depth = 0) {
  size_t eol = bytes.find("\r\n", pos);
  if (eol == std::string_view::npos) {
    if (bytes.size() - pos > k_max_command_reply_bytes) {
      why = "a line of more than " + std::to_string(k_max_command_reply_bytes) + " bytes";
      return Parsed::kMalformed;
    }
    return Parsed::kIncomplete;
  }
  char type = bytes[pos];
  std::string_view line = bytes.substr(pos + 1, eol - pos - 1);
  size_t next = eol + 2;
  out = RespReply{};
  out.type = type;
  switch (type) {
    case '+':
    case '-':
      out.str = std::string(line);
      pos = next;
      return Parsed::kDone;
    case ':': {
      bool negative = !line.empty() && line[0] == '-';
      auto n = parse_count(negative ? line.substr(1) : line);
      if (!n) break;
      out.integer = negative ? -static_cast<int64_t>(*n) : static_cast<int64_t>(*n);
      pos = next;
      return Parsed::kDone;
    }
    case '$':
    case '*': {
      if (line == "-1") {
        out.type = 'n';
        pos = next;
        return Parsed::kDone;
      }
      auto n = parse_count(line);
      if (!n) break;
      if (type == '$') {
        if (*n > k_max_command_reply_bytes) {
          why = "a string of " + std::to_string(*n) + " bytes where a few were due";
          return Parsed::kMalformed;
        }
        if (bytes.size() - next < *n + 2) return Parsed::kIncomplete;
        if (bytes.substr(next + *n, 2) != "\r\n") {
          why = "a string that does not end where its length says";
          return Parsed::kMalformed;
        }
        out.str = std::string(bytes.substr(next, *n));
        pos = next + *n + 2;
        return Parsed::kDone;
      }
      if (*n > k_max_reply_elements || depth >= k_max_reply_depth) {
        why = "an array of " + std::to_string(*n) + " elements at depth " + std::to_string(depth) + " where a few were due";
        return Parsed::kMalformed;
      }
      out.elements.resize(*n);
      for (auto& e : out.elements) {
        Parsed p = parse_reply(bytes, next, e, why, depth + 1);
        if (p != Parsed::kDone) return p;
      }
      pos = next;
      return Parsed::kDone;
    }
    default:
      why = "a reply starting \"" + shown(bytes.substr(pos, eol - pos), 16) + "\"";
      return Parsed::kMalformed;
  }
  why = "a malformed number \"" + shown(line, 24) + "\"";
  return Parsed::kMalformed;
}

// What arrived on a connection and is not yet parsed.
struct ReplyBuffer {
  std::string bytes;
  size_t pos = 0;
  bool empty() const { return pos == bytes.size(); }
  // Takes one whole reply if there is one.
  Parsed take(RespReply& out, std::string& why) {
    size_t at = pos;
    Parsed p = parse_reply(bytes, at, out, why);
    if (p != Parsed::kDone) return p;
    pos = at;
    if (pos == bytes.size()) {
      bytes.clear();
      pos = 0;
    }
    return p;
  }
  // Room for what the next recv brings; false when more than a reply may hold is waiting.
  bool too_much() const { return bytes.size() - pos > k_max_command_reply_bytes + k_reply_head_bytes; }
};

// Whether an error reply refuses the credentials or the user's rights: -NOPERM (a command, key
// or channel the user's ACL does not allow), -WRONGPASS, -NOAUTH (a password is needed), and a
// script's call the ACL refuses ("-ERR The user executing the script can't ...").
bool refuses_credentials(std::string_view error) {
  return error.rfind("NOPERM", 0) == 0 || error.rfind("WRONGPASS", 0) == 0 || error.rfind("NOAUTH", 0) == 0 ||
         error.find("user executing the script can't") != std::string_view::npos;
}

// A connection in subscribe mode: it only ever receives. What arrives is read after poll() says
// there is something, so a quiet channel never times the socket out.
class RedisLeaseWatch final : public RemoteEndpoint::LeaseWatch {
 public:
  RedisLeaseWatch(redisContext* c, std::string label, ReplyBuffer buffer)
      : m_c(c), m_label(std::move(label)), m_buffer(std::move(buffer)) {}
  ~RedisLeaseWatch() override { redisFree(m_c); }

  Result<bool> wait(std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      RespReply r;
      std::string why;
      Parsed p = m_buffer.take(r, why);
      if (p == Parsed::kMalformed) return unavailable(m_label + ": the lease channel answered " + why);
      if (p == Parsed::kDone) {
        if (r.type == '*' && !r.elements.empty() && r.elements[0].type == '$' && r.elements[0].text() == "message") return true;
        continue;
      }
      if (m_buffer.too_much()) return unavailable(m_label + ": the lease channel sent more than a message holds");
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{m_c->fd, POLLIN, 0};
      int n = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return unavailable(m_label + ": the lease channel broke: " + std::strerror(errno));
      if (n == 0) return false;
      char chunk[4096];
      ssize_t got = ::recv(m_c->fd, chunk, sizeof chunk, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) return unavailable(m_label + ": the lease channel closed");
      if (got < 0) return unavailable(m_label + ": the lease channel broke: " + std::strerror(errno));
      m_buffer.bytes.append(chunk, static_cast<size_t>(got));
    }
  }

 private:
  redisContext* m_c;
  std::string m_label;
  ReplyBuffer m_buffer;
};

class RedisEndpoint final : public RemoteEndpoint {
 public:
  RedisEndpoint(EndpointUrl url, EndpointOptions options) : RemoteEndpoint(std::move(url)), m_options(std::move(options)) {
    if (!m_url.password.empty()) m_options.password = m_url.password;
  }
  ~RedisEndpoint() override {
    for (auto* c : m_idle) redisFree(c);
  }

  Result<std::optional<std::string>> get_at_most(const std::string& name, size_t max_bytes) override {
    std::string key = m_options.prefix + name;
    size_t limit = answer_limit(max_bytes, m_options);
    std::string command = format_command({"GET", key});
    std::optional<std::string> value;
    Status st = on_connection([&](redisContext* c, bool& closed) {
      value.reset();
      KILN_RETURN_IF_ERROR(send_all(c->fd, command, closed));
      return read_value(c->fd, key, limit, value, closed);
    });
    if (!st.ok()) return as_read_failure(std::move(st));
    return value;
  }

  Status put(const std::string& name, std::string_view bytes) override {
    std::string key = m_options.prefix + name;
    RespReply reply;
    KILN_RETURN_IF_ERROR(command({"SET", key, bytes}, reply));
    if (reply.type != '+') return unexpected("SET", key, reply);
    return {};
  }

  Status ping() override {
    RespReply reply;
    KILN_RETURN_IF_ERROR(as_read_failure(command({"PING"}, reply)));
    if (reply.type != '+') return as_read_failure(unexpected("PING", "", reply));
    return {};
  }

  bool has_leases() const override { return true; }

  Result<bool> take_lease(const std::string& name, const std::string& holder, std::chrono::milliseconds ttl) override {
    RespReply reply;
    std::string key = m_options.prefix + name, ms = std::to_string(ttl.count());
    KILN_RETURN_IF_ERROR(command({"SET", key, holder, "NX", "PX", ms}, reply));
    if (reply.type == 'n') return false;
    if (reply.type != '+') return unexpected("SET NX", key, reply);
    return true;
  }

  Result<bool> renew_lease(const std::string& name, const std::string& holder, std::chrono::milliseconds ttl) override {
    RespReply reply;
    std::string key = m_options.prefix + name, ms = std::to_string(ttl.count());
    KILN_RETURN_IF_ERROR(command({"EVAL", k_renew_script, "1", key, holder, ms}, reply));
    if (reply.type != ':') return unexpected("EVAL (renew)", key, reply);
    return reply.integer == 1;
  }

  Status release_lease(const std::string& name, const std::string& holder) override {
    RespReply reply;
    std::string key = m_options.prefix + name;
    KILN_RETURN_IF_ERROR(command({"EVAL", k_release_script, "1", key, holder}, reply));
    if (reply.type != ':') return unexpected("EVAL (release)", key, reply);
    return {};
  }

  Result<bool> lease_held(const std::string& name) override {
    RespReply reply;
    std::string key = m_options.prefix + name;
    KILN_RETURN_IF_ERROR(command({"EXISTS", key}, reply));
    if (reply.type != ':') return unexpected("EXISTS", key, reply);
    return reply.integer > 0;
  }

  Result<std::unique_ptr<LeaseWatch>> watch_lease(const std::string& name) override {
    KILN_ASSIGN_OR_RETURN(redisContext * c, connect());
    std::string key = m_options.prefix + name;
    RespReply reply;
    ReplyBuffer buffer;
    bool closed = false;
    Status st = send_all(c->fd, format_command({"SUBSCRIBE", key}), closed);
    if (st.ok()) st = read_reply(c->fd, buffer, reply, "SUBSCRIBE", closed);
    if (st.ok() && reply.type != '*') st = unexpected("SUBSCRIBE", key, reply);
    if (!st.ok()) {
      redisFree(c);
      return st;
    }
    // A message that came with the confirmation stays in the buffer for the first wait.
    return std::unique_ptr<LeaseWatch>(new RedisLeaseWatch(c, label(), std::move(buffer)));
  }

  Result<int64_t> lease_watchers(const std::string& name) override {
    RespReply reply;
    std::string key = m_options.prefix + name;
    KILN_RETURN_IF_ERROR(command({"PUBSUB", "NUMSUB", key}, reply));
    if (reply.type != '*' || reply.elements.size() != 2 || reply.elements[1].type != ':')
      return unexpected("PUBSUB NUMSUB", key, reply);
    return reply.elements[1].integer;
  }

 private:
  // " as user 'reader'", or "" for the default user.
  std::string as_user() const { return m_url.username.empty() ? "" : " as user '" + m_url.username + "'"; }

  // A read the server refuses these credentials is a failure like any other (remote_endpoint.h):
  // the tier is skipped for a while and the refusal said.
  static Status as_read_failure(Status st) {
    if (st.code() == StatusCode::kPermissionDenied) return unavailable(st.message());
    return st;
  }

  // A reply that is not what `what` answers: an error the server gave (kPermissionDenied when it
  // refuses the credentials or the user's rights), or a reply of another type.
  Status unexpected(const std::string& what, const std::string& key, const RespReply& r) const {
    if (r.type == '-') {
      std::string error = shown(r.str, 300);
      if (refuses_credentials(r.str)) {
        std::string hint =
            r.str.rfind("WRONGPASS", 0) == 0 ? " (the password in the tier's |password-file= or URL is not this user's)"
            : r.str.rfind("NOAUTH", 0) == 0  ? " (the server wants a password: give the tier |password-file=F, and its ACL user "
                                              "as redis://USER@HOST:PORT)"
                                            : " (the user's ACL does not allow it: docs/SECURITY.md, 'Server roles')";
        return permission_denied(label() + ": the server refused " + what + (key.empty() ? "" : " " + key) + as_user() + ": " +
                                 error + hint);
      }
      return unavailable(label() + ": " + what + " failed: " + error);
    }
    return unavailable(label() + ": " + what + " answered something unexpected (a reply of type '" + std::string(1, r.type) +
                       "')");
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
    auto setup = [&](std::vector<std::string_view> args, const std::string& what) -> Status {
      RespReply reply;
      bool closed = false;
      KILN_RETURN_IF_ERROR(send_all(c->fd, format_command(args), closed));
      KILN_RETURN_IF_ERROR(read_reply(c->fd, reply, what, closed));
      if (reply.type != '+') return unexpected(what, "", reply);
      return {};
    };
    Status st;
    // A user with `nopass` takes any password, "" too.
    if (!m_url.username.empty()) st = setup({"AUTH", m_url.username, m_options.password}, "AUTH");
    else if (!m_options.password.empty()) st = setup({"AUTH", m_options.password}, "AUTH");
    if (st.ok() && m_url.db) st = setup({"SELECT", std::to_string(m_url.db)}, "SELECT");
    if (!st.ok()) {
      redisFree(c);
      return st;
    }
    return c;
  }

  // `run(c, closed)` on an idle connection (or a new one); `closed` says a failure was the
  // server closing it. A connection that failed is freed: a stream that broke mid-reply cannot
  // be resynchronised. One is kept only after a whole reply and nothing after it.
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

  // One command and its reply (any but GET's).
  Status command(const std::vector<std::string_view>& args, RespReply& reply) {
    std::string bytes = format_command(args);
    std::string what(args.front());
    return on_connection([&](redisContext* c, bool& closed) {
      KILN_RETURN_IF_ERROR(send_all(c->fd, bytes, closed));
      return read_reply(c->fd, reply, what, closed);
    });
  }

  // Reads one whole reply to `what` (bounded: k_max_command_reply_bytes); anything after it is
  // an error.
  Status read_reply(int fd, RespReply& reply, const std::string& what, bool& closed) const {
    ReplyBuffer buffer;
    KILN_RETURN_IF_ERROR(read_reply(fd, buffer, reply, what, closed));
    if (!buffer.empty()) return unavailable(label() + ": " + what + " answered more than one reply");
    return {};
  }
  // The same, leaving what came after the reply in `buffer`.
  Status read_reply(int fd, ReplyBuffer& buffer, RespReply& reply, const std::string& what, bool& closed) const {
    for (;;) {
      std::string why;
      Parsed p = buffer.take(reply, why);
      if (p == Parsed::kDone) return {};
      if (p == Parsed::kMalformed) return unavailable(label() + ": " + what + " answered " + why);
      if (buffer.too_much())
        return unavailable(label() + ": " + what + " answered more than " + std::to_string(k_max_command_reply_bytes) + " bytes");
      char chunk[4096];
      ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return socket_failure(n, errno, "before answering " + what, closed);
      buffer.bytes.append(chunk, static_cast<size_t>(n));
    }
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
  // error ("-..."). A length over `limit` is refused as soon as its line is read; the
  // value is received straight from the socket into a string that grows as its bytes arrive
  // (k_first_answer_allocation, then doubling), never sized by the length alone. Anything that
  // breaks the protocol (a reply cut short, a length its value does not match, more than one
  // reply) is an error, never data.
  Status read_value(int fd, const std::string& key, size_t limit, std::optional<std::string>& value, bool& closed) const {
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
      return unavailable(label() + ": GET answered something unexpected (a reply starting \"" + shown(line, 16) + "\")");
    if (line[0] == '-') {
      RespReply error;
      error.type = '-';
      error.str = std::string(line.substr(1));
      return unexpected("GET", key, error);
    }
    if (line == "$-1") {
      if (!rest.empty()) return unavailable(label() + ": GET answered more than one reply");
      return {};
    }
    auto declared = parse_count(line.substr(1));
    if (!declared) return unavailable(label() + ": GET answered a malformed length \"" + shown(line.substr(1), 24) + "\"");
    uint64_t length = *declared;
    if (length > limit)
      return unavailable(label() + ": GET " + key + " answered a length of " + std::to_string(length) + " bytes, more than the " +
                         std::to_string(limit) + " it may hold (refused unread)");
    std::string out;
    size_t got = 0;
    while (got < length) {
      if (got == out.size()) {
        size_t grown = out.empty() ? k_first_answer_allocation : out.size() * 2;
        out.resize(static_cast<size_t>(std::min<uint64_t>(length, grown)));
      }
      size_t before = got;
      KILN_RETURN_IF_ERROR(receive(fd, out.data() + got, out.size() - got, rest, closed, [&](size_t more) {
        return "after " + std::to_string(before + more) + " of the value's " + std::to_string(length) + " bytes";
      }));
      got = out.size();
    }
    char end[2];
    KILN_RETURN_IF_ERROR(receive(fd, end, 2, rest, closed, [&](size_t) {
      return "before the end of the value's " + std::to_string(length) + " bytes";
    }));
    if (end[0] != '\r' || end[1] != '\n')
      return unavailable(label() + ": GET's value does not end where its length (" + std::to_string(length) + " bytes) says");
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
  if (!url.password.empty() && !options.password.empty() && url.password != options.password)
    return invalid_argument("remote '" + url.text + "': a password in the URL and another in |password-file=: give one");
  if (!url.password.empty()) {
    static std::once_flag said;
    std::call_once(said, [&] {
      KILN_LOG_AT(kWarn, "remote", "remote '" + url.text + "': the password written in its URL shows in process lists, shell "
                                   "histories and logs; name the user in the URL (redis://" + url.username + "@HOST:PORT) and put "
                                   "the password in a file only you can read, given as |password-file=F");
    });
  }
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
