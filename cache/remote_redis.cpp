// A Redis server through hiredis: GET and SET of one value per name under a prefix, and
// leases as keys set only if absent (SET NX PX), renewed and released by their holder alone
// (a compare-and-set in a Lua script, so a lease that expired and was taken over is never
// extended or deleted by its old holder).
#include "cache/remote_endpoint.h"

#if KILN_WITH_HIREDIS
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <mutex>
#include <vector>

namespace kiln::cache {
namespace {

constexpr const char* k_renew_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
constexpr const char* k_release_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

struct Reply {
  redisReply* r = nullptr;
  ~Reply() {
    if (r) freeReplyObject(r);
  }
};

class RedisEndpoint final : public RemoteEndpoint {
 public:
  RedisEndpoint(EndpointUrl url, EndpointOptions options) : RemoteEndpoint(std::move(url)), m_options(std::move(options)) {}
  ~RedisEndpoint() override {
    for (auto* c : m_idle) redisFree(c);
  }

  Result<std::optional<std::string>> get(const std::string& name) override {
    std::string key = m_options.prefix + name;
    Reply reply;
    KILN_RETURN_IF_ERROR(command({"GET", key}, reply));
    if (reply.r->type == REDIS_REPLY_NIL) return std::optional<std::string>();
    if (reply.r->type != REDIS_REPLY_STRING) return unexpected("GET", reply.r);
    return std::optional<std::string>(std::string(reply.r->str, reply.r->len));
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

  // One command on an idle connection (or a new one). A connection that failed is freed:
  // hiredis cannot resynchronise a stream that broke mid-reply.
  Status command(const std::vector<std::string_view>& args, Reply& reply) {
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
      Status st = send(c, args, reply);
      if (st.ok()) {
        std::lock_guard lock(m_mutex);
        m_idle.push_back(c);
        return {};
      }
      // A kept connection the server closed (a restart) is worth once more on a new one; a
      // timeout is not (it would double the wait).
      bool closed = c->err == REDIS_ERR_EOF || (c->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
      redisFree(c);
      if (reused && closed && attempt == 0) continue;
      return st;
    }
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
