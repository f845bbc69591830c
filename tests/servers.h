// Real servers for the remote-tier tests, on 127.0.0.1 and free ports: Debian's redis-server,
// nginx (WebDAV PUT, over TLS with certificates openssl makes at test time) and tinyproxy,
// each started as a child process in a test's temporary folder, and a TCP proxy that passes,
// delays, truncates, corrupts or swallows what a server answers.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace kiln::testing {

// A port nothing listens on now (bound and released).
int free_port();
// True once something accepts connections on 127.0.0.1:port, within `timeout_ms`.
bool wait_for_port(int port, int timeout_ms = 10000);

// A child process started with posix_spawn (no allocation between fork and exec, so it is
// safe from a test with threads), its output in files; killed on destruction.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const std::string& out_path,
               const std::string& err_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  pid_t pid() const { return m_pid; }
  // Waits for it; its exit code, or 128 + the signal that ended it.
  int wait();
  void kill(int signal);

 private:
  pid_t m_pid = -1;
  bool m_waited = false;
  int m_status = 0;
};

// Runs every command at once and waits for them all (separate processes: "nodes").
std::vector<ProcessResult> run_processes(const std::vector<std::vector<std::string>>& commands,
                                         const std::vector<std::map<std::string, std::string>>& envs);

// Where a server binary is, or "" (then the test skips and says to run scripts/setup).
std::string find_program(const std::string& name, const std::vector<std::string>& also = {});

struct RedisTls {
  std::string cert, key;  // non-empty: the port speaks TLS only, with this certificate
};

class RedisServer {
 public:
  static std::string binary();  // "" when redis-server is not installed
  // Starts on a free port, persisting nothing to disk.
  explicit RedisServer(const std::string& dir, RedisTls tls = {});
  ~RedisServer();
  int port() const { return m_port; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }
  // One command through redis-cli as the default user ("ACL", "SETUSER", ...): its output, or
  // an exception saying why it failed.
  std::string cli(const std::vector<std::string>& args) const;
  // SIGKILL, as a crash or an OOM kill would; then start() again on the same port (empty).
  void kill();
  void start();

 private:
  std::string m_dir;
  int m_port;
  RedisTls m_tls;
  std::unique_ptr<ChildProcess> m_process;
};

// stunnel in client mode: accepts plain connections on a free port of 127.0.0.1 and carries
// them over TLS to 127.0.0.1:`server_port`, checking the server's certificate against `ca_file`
// and its address: the local TLS tunnel the README advises for a TLS Redis.
class StunnelClient {
 public:
  static std::string binary();  // "" when stunnel is not installed
  StunnelClient(const std::string& dir, int server_port, const std::string& ca_file);
  ~StunnelClient();
  int port() const { return m_port; }

 private:
  std::string m_dir;
  int m_port;
  std::unique_ptr<ChildProcess> m_process;
};

// Debian's openssl command, or "" (then a TLS test skips and says to run scripts/setup).
std::string openssl_binary();

// A certificate authority made by openssl at test time in `dir` (EC P-256 keys), and the
// certificates it signs: nothing is stored in the tree, nothing outlives the test.
class TestCa {
 public:
  explicit TestCa(const std::string& dir, const std::string& name = "kiln test CA");
  const std::string& ca_pem() const { return m_ca_pem; }
  struct Issued {
    std::string cert, key;  // PEM files; the key's mode is 0600
  };
  // A certificate for `alt_names` ("IP:127.0.0.1,DNS:localhost"), for a server or a client,
  // valid `days` from now; negative: it expired that many days ago.
  Issued issue(const std::string& name, const std::string& alt_names, int days = 2, bool client = false) const;

 private:
  std::string m_dir, m_ca_pem, m_ca_key;
};

// The three certificates a node must refuse, each with what its warning says: one from a CA the
// node does not trust (made in `dir`), one expired and one for another name, both issued by
// `trusted` for 127.0.0.1.
struct BadCertificate {
  const char* what;
  TestCa::Issued cert;
  const char* says;
};
std::vector<BadCertificate> bad_certificates(const TestCa& trusted, const std::string& dir);

struct NginxOptions {
  std::string bearer_token{};  // non-empty: requests must carry "Authorization: Bearer <token>"
  std::string basic_user{}, basic_password{};  // non-empty: basic auth
  // Non-empty: a publisher, the one user whose PUT (and DELETE) is taken (nginx's limit_except
  // GET HEAD with auth_basic); GET and HEAD take basic_user's credentials too.
  std::string publisher_user{}, publisher_password{};
  std::string tls_cert{}, tls_key{};       // non-empty: https (and HTTP/2) with this certificate
  std::string client_ca{};                 // non-empty: clients must show a certificate this CA signed
  int proxy_to = 0;  // non-zero: pass every request to http://127.0.0.1:proxy_to instead of serving files
  std::string redirect_to{};  // non-empty: answer every request 308 to redirect_to + the request's URI
  bool pass_host = false;   // with proxy_to: pass the client's Host header (what a SigV4 signature covers)
  // Non-zero: a real rate limiter (limit_req) that answers what S3 answers past it (503 SlowDown)
  // to requests beyond this many a second.
  int limit_per_second = 0;
};

class NginxServer {
 public:
  static std::string binary();  // "" when nginx (with the WebDAV module) is not installed
  explicit NginxServer(const std::string& dir, NginxOptions options = {});
  ~NginxServer();
  int port() const { return m_port; }
  std::string url(const std::string& path = "/kiln") const {
    return std::string(m_tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(m_port) + path;
  }
  // The folder nginx serves: what a PUT to /kiln/x wrote is at store() + "/kiln/x".
  std::string store() const { return m_dir + "/store"; }
  // The requests served so far, one line each: "METHOD URI STATUS CONNECTION PROTOCOL".
  std::vector<std::string> requests() const;

 private:
  std::string m_dir;
  int m_port;
  bool m_tls = false;
  std::unique_ptr<ChildProcess> m_process;
};

// moto's S3 server (PyPI's moto[server], which scripts/setup installs into kiln's venv), with
// its IAM authentication on: every request's SigV4 signature is checked against the keys it
// issued (SignatureDoesNotMatch, InvalidAccessKeyId), as S3 and Ceph's radosgw do. Prepared by
// tests/cache/s3_setup.py in the actions it lets through unauthenticated.
class S3Server {
 public:
  static std::string binary();  // moto_server, or "" (then the test skips: scripts/setup installs it)
  enum class Mode {
    kUser,  // an IAM user's access key (access_key(), secret_key())
    kRole,  // a role to assume with a web-identity token (role_arn()): the next unauthenticated
            // action is left for STS's AssumeRoleWithWebIdentity
    kRoles,  // two IAM users: a publisher (access_key(), secret_key()) allowed to read and write
             // the bucket, and a reader (reader_access_key(), ...) whose policy allows only
             // s3:GetObject and s3:ListBucket (docs/SECURITY-roles.md)
  };
  S3Server(const std::string& dir, const std::string& bucket, Mode mode = Mode::kUser);
  ~S3Server();
  int port() const { return m_port; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(m_port); }
  const std::string& access_key() const { return m_access_key; }
  const std::string& secret_key() const { return m_secret_key; }
  const std::string& role_arn() const { return m_role_arn; }
  const std::string& reader_access_key() const { return m_reader_access_key; }
  const std::string& reader_secret_key() const { return m_reader_secret_key; }

 private:
  std::string m_dir;
  int m_port;
  std::string m_access_key, m_secret_key, m_role_arn, m_reader_access_key, m_reader_secret_key;
  std::unique_ptr<ChildProcess> m_process;
};

// tinyproxy (a real HTTP proxy that tunnels https through CONNECT) on a free port.
class TinyProxy {
 public:
  static std::string binary();  // "" when tinyproxy is not installed
  explicit TinyProxy(const std::string& dir);
  ~TinyProxy();
  int port() const { return m_port; }

 private:
  std::string m_dir;
  int m_port;
  std::unique_ptr<ChildProcess> m_process;
};

// Listens on a free port and forwards each connection to 127.0.0.1:upstream, doing to the
// server's answers what `fault` says. The fault may change while it runs.
class FaultProxy {
 public:
  enum class Fault {
    kNone,      // pass everything
    kSilent,    // accept, read, never answer
    kDelay,     // hold each answer back `amount` ms
    kTruncate,  // pass `amount` bytes of the answers on a connection, then close it
    kFlip,      // invert the byte at offset `amount` of the answers on each connection
    kRefuse,    // close each connection at once
    kStall,     // pass `amount` bytes of the answers on a connection, then nothing (it stays open)
  };
  explicit FaultProxy(int upstream_port);
  ~FaultProxy();
  void set(Fault fault, size_t amount = 0);
  int port() const { return m_port; }
  std::string url(const std::string& scheme, const std::string& path = "") const {
    return scheme + "://127.0.0.1:" + std::to_string(m_port) + path;
  }
  int connections() const { return m_connections.load(); }

 private:
  void accept_loop();
  void serve(int client);  // relays, then closes the client's socket
  void relay(int client);
  void forget(int fd);     // closes it, and the destructor no longer shuts it down

  int m_upstream, m_port = 0, m_listen = -1;
  std::atomic<bool> m_stop{false};
  std::atomic<int> m_connections{0};
  std::atomic<Fault> m_fault{Fault::kNone};
  std::atomic<size_t> m_amount{0};
  std::thread m_acceptor;
  std::mutex m_mutex;
  std::vector<std::thread> m_threads;
  std::vector<int> m_sockets;
};

}  // namespace kiln::testing
