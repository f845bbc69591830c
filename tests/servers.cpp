#include "tests/servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>

extern char** environ;

namespace kiln::testing {
namespace {

int listen_socket(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const char* data, size_t n) {
  while (n) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

int free_port() {
  int fd = listen_socket(0);
  int port = bound_port(fd);
  ::close(fd);
  return port;
}

bool wait_for_port(int port, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = connect_loopback(port);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    ::usleep(10000);
  }
  return false;
}

std::string find_program(const std::string& name, const std::vector<std::string>& also) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  for (auto& a : also)
    if (::access(a.c_str(), X_OK) == 0) return a;
  return "";
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                           const std::string& out_path, const std::string& err_path) {
  // Everything the child needs is built here, before the spawn.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (!env.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
  }
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int rc = posix_spawnp(&m_pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
}

ChildProcess::~ChildProcess() {
  if (!m_waited) {
    ::kill(m_pid, SIGKILL);
    wait();
  }
}

int ChildProcess::wait() {
  if (!m_waited) {
    while (::waitpid(m_pid, &m_status, 0) < 0 && errno == EINTR) {
    }
    m_waited = true;
  }
  return WIFEXITED(m_status) ? WEXITSTATUS(m_status) : 128 + WTERMSIG(m_status);
}

void ChildProcess::kill(int signal) {
  if (!m_waited) ::kill(m_pid, signal);
}

std::vector<ProcessResult> run_processes(const std::vector<std::vector<std::string>>& commands,
                                         const std::vector<std::map<std::string, std::string>>& envs) {
  TempDir io;
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (size_t i = 0; i < commands.size(); ++i)
    children.push_back(std::make_unique<ChildProcess>(commands[i], i < envs.size() ? envs[i] : std::map<std::string, std::string>{},
                                                      io / ("out" + std::to_string(i)), io / ("err" + std::to_string(i))));
  std::vector<ProcessResult> out(commands.size());
  for (size_t i = 0; i < children.size(); ++i) {
    out[i].exit_code = children[i]->wait();
    out[i].out = read_text(io / ("out" + std::to_string(i)));
    out[i].err = read_text(io / ("err" + std::to_string(i)));
  }
  return out;
}

// ---- redis-server

std::string RedisServer::binary() { return find_program("redis-server", {"/usr/bin/redis-server"}); }

RedisServer::RedisServer(const std::string& dir, RedisTls tls) : m_dir(dir), m_port(free_port()), m_tls(std::move(tls)) { start(); }

RedisServer::~RedisServer() { m_process.reset(); }

void RedisServer::start() {
  std::vector<std::string> argv{binary(), "--port", std::to_string(m_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", m_dir, "--daemonize", "no"};
  if (!m_tls.cert.empty())  // TLS on the port, no plain port, no client certificates asked for
    argv = {binary(), "--port", "0", "--tls-port", std::to_string(m_port), "--tls-cert-file", m_tls.cert, "--tls-key-file", m_tls.key,
            "--tls-auth-clients", "no", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", m_dir, "--daemonize", "no"};
  m_process = std::make_unique<ChildProcess>(argv, std::map<std::string, std::string>{}, m_dir + "/redis.out", m_dir + "/redis.err");
  if (!wait_for_port(m_port)) throw std::runtime_error("redis-server did not start on port " + std::to_string(m_port));
}

std::string RedisServer::cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv{find_program("redis-cli", {"/usr/bin/redis-cli"}), "-h", "127.0.0.1", "-p", std::to_string(m_port)};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_process(argv);
  // redis-cli says a server's error on stdout ("(error) ..." on a terminal, the bare line here).
  if (r.exit_code != 0 || r.out.rfind("ERR", 0) == 0 || r.out.rfind("NOPERM", 0) == 0)
    throw std::runtime_error("redis-cli " + args.front() + " failed: " + r.out + r.err);
  return r.out;
}

void RedisServer::kill() {
  m_process->kill(SIGKILL);
  m_process->wait();
}

std::string NginxServer::binary() {
  static const std::string found = [] {
    std::string nginx = find_program("nginx", {"/usr/sbin/nginx"});
    if (nginx.empty()) return std::string();
    auto v = run_process({nginx, "-V"});
    return v.err.find("http_dav_module") != std::string::npos ? nginx : std::string();
  }();
  return found;
}

// ---- certificates

std::string openssl_binary() { return find_program("openssl", {"/usr/bin/openssl"}); }

namespace {

void openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{openssl_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_process(argv);
  if (r.exit_code != 0) {
    std::string cmd;
    for (auto& a : argv) cmd += a + " ";
    throw std::runtime_error("openssl failed (" + cmd + "): " + r.err);
  }
}

}  // namespace

TestCa::TestCa(const std::string& dir, const std::string& name)
    : m_dir(dir), m_ca_pem(dir + "/ca.pem"), m_ca_key(dir + "/ca.key") {
  openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", m_ca_key, "-out", m_ca_pem,
           "-days", "2", "-subj", "/CN=" + name});
}

TestCa::Issued TestCa::issue(const std::string& name, const std::string& alt_names, int days, bool client) const {
  Issued out{m_dir + "/" + name + ".pem", m_dir + "/" + name + ".key"};
  std::string csr = m_dir + "/" + name + ".csr", ext = m_dir + "/" + name + ".ext";
  openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", out.key, "-out", csr, "-subj",
           "/CN=" + name});
  std::ofstream(ext) << "subjectAltName=" << alt_names << "\nextendedKeyUsage=" << (client ? "clientAuth" : "serverAuth") << "\n";
  // A negative -days puts notAfter before now: a certificate that has expired.
  openssl({"x509", "-req", "-in", csr, "-CA", m_ca_pem, "-CAkey", m_ca_key, "-CAcreateserial", "-days", std::to_string(days),
           "-extfile", ext, "-out", out.cert});
  ::chmod(out.key.c_str(), 0600);
  return out;
}

// ---- nginx

NginxServer::NginxServer(const std::string& dir, NginxOptions options) : m_dir(dir), m_port(free_port()) {
  m_tls = !options.tls_cert.empty();
  std::string auth;
  if (!options.basic_user.empty()) {
    std::ofstream(m_dir + "/htpasswd") << options.basic_user << ":{PLAIN}" << options.basic_password << "\n"
                                       << (options.publisher_user.empty() ? ""
                                                                          : options.publisher_user + ":{PLAIN}" + options.publisher_password + "\n");
    auth += "      auth_basic \"kiln\";\n      auth_basic_user_file " + m_dir + "/htpasswd;\n";
  }
  if (!options.publisher_user.empty()) {  // every method but GET and HEAD: the publisher only
    std::ofstream(m_dir + "/publishers.htpasswd") << options.publisher_user << ":{PLAIN}" << options.publisher_password << "\n";
    auth += "      limit_except GET HEAD {\n        auth_basic \"kiln publishers\";\n        auth_basic_user_file " + m_dir +
            "/publishers.htpasswd;\n      }\n";
  }
  if (!options.bearer_token.empty())
    auth += "      if ($http_authorization != \"Bearer " + options.bearer_token + "\") { return 401; }\n";
  std::string listen = "127.0.0.1:" + std::to_string(m_port);
  if (m_tls) {
    listen += " ssl http2;\n    ssl_certificate " + options.tls_cert + ";\n    ssl_certificate_key " + options.tls_key + ";";
    if (!options.client_ca.empty()) listen += "\n    ssl_client_certificate " + options.client_ca + ";\n    ssl_verify_client on;";
  } else {
    listen += ";";
  }
  ::mkdir((m_dir + "/store").c_str(), 0700);
  std::ofstream(m_dir + "/nginx.conf") << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << m_dir
                                        << "/nginx.pid;\nerror_log " << m_dir << "/error.log warn;\n"
                                        << "events { worker_connections 256; }\nhttp {\n"
                                        << (options.limit_per_second
                                                ? "  limit_req_zone $binary_remote_addr zone=kiln:1m rate=" + std::to_string(options.limit_per_second) +
                                                      "r/s;\n"
                                                : std::string())
                                        << "  log_format kiln '$request_method $uri $status $connection $server_protocol';\n"
                                        << "  access_log " << m_dir << "/access.log kiln;\n"
                                        << "  client_body_temp_path " << m_dir << "/body;\n  proxy_temp_path " << m_dir
                                        << "/proxy;\n  fastcgi_temp_path " << m_dir << "/fastcgi;\n  uwsgi_temp_path " << m_dir
                                        << "/uwsgi;\n  scgi_temp_path " << m_dir << "/scgi;\n  client_max_body_size 0;\n"
                                        << "  server {\n    listen " << listen << "\n    root " << m_dir << "/store;\n"
                                        << "    location / {\n"
                                        << (!options.redirect_to.empty() ? "      return 308 " + options.redirect_to + "$request_uri;\n"
                                            : options.proxy_to ? "      proxy_pass http://127.0.0.1:" + std::to_string(options.proxy_to) +
                                                                   ";\n      proxy_read_timeout 600s;\n"
                                                             : "      dav_methods PUT DELETE;\n      create_full_put_path on;\n"
                                                               "      dav_access user:rw;\n")
                                        << (options.pass_host ? "      proxy_set_header Host $http_host;\n" : "")
                                        << (options.limit_per_second
                                                ? "      limit_req zone=kiln;\n      limit_req_status 503;\n      error_page 503 = @slowdown;\n"
                                                : "")
                                        << auth << "    }\n"
                                        << (options.limit_per_second
                                                ? "    location @slowdown {\n      default_type application/xml;\n      return 503 "
                                                  "'<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>';\n    }\n"
                                                : "")
                                        << "  }\n}\n";
  m_process = std::make_unique<ChildProcess>(
      std::vector<std::string>{binary(), "-p", m_dir, "-c", m_dir + "/nginx.conf", "-e", m_dir + "/error.log"},
      std::map<std::string, std::string>{}, m_dir + "/nginx.out", m_dir + "/nginx.err");
  if (!wait_for_port(m_port))
    throw std::runtime_error("nginx did not start on port " + std::to_string(m_port) + ": " + read_text(m_dir + "/nginx.err") +
                             read_text(m_dir + "/error.log"));
}

NginxServer::~NginxServer() { m_process.reset(); }

std::vector<std::string> NginxServer::requests() const {
  std::vector<std::string> out;
  std::string all = read_text(m_dir + "/access.log");
  for (size_t start = 0, end; (end = all.find('\n', start)) != std::string::npos; start = end + 1) out.push_back(all.substr(start, end - start));
  return out;
}

// ---- moto's S3 server

std::string S3Server::binary() {
  const char* venv = std::getenv("KILN_VENV");
  const char* home = std::getenv("HOME");
  std::string in_venv = venv && *venv ? std::string(venv) + "/bin/moto_server"
                                      : std::string(home ? home : "/root") + "/.local/share/kiln-dev/venv/bin/moto_server";
  return find_program("moto_server", {in_venv});
}

S3Server::S3Server(const std::string& dir, const std::string& bucket, Mode mode) : m_dir(dir), m_port(free_port()) {
  // The setup's actions (3 IAM calls and the bucket; 2 IAM calls, the bucket and STS's
  // AssumeRoleWithWebIdentity; or 6 IAM calls and the bucket) pass unauthenticated; every
  // request after them is checked.
  std::string free_actions = mode == Mode::kUser ? "3" : mode == Mode::kRole ? "4" : "7";
  m_process = std::make_unique<ChildProcess>(std::vector<std::string>{binary(), "-H", "127.0.0.1", "-p", std::to_string(m_port)},
                                             std::map<std::string, std::string>{{"INITIAL_NO_AUTH_ACTION_COUNT", free_actions}},
                                             m_dir + "/moto.out", m_dir + "/moto.err");
  if (!wait_for_port(m_port, 30000))
    throw std::runtime_error("moto_server did not start on port " + std::to_string(m_port) + ": " + read_text(m_dir + "/moto.err"));
  std::string python = binary().substr(0, binary().rfind('/')) + "/python";
  auto r = run_process({python, KILN_TEST_SOURCE_DIR "/tests/cache/s3_setup.py", endpoint(), bucket, mode == Mode::kUser ? "user" : mode == Mode::kRole ? "role" : "roles"});
  if (r.exit_code != 0) throw std::runtime_error("s3_setup.py failed: " + r.err + read_text(m_dir + "/moto.err"));
  std::string out = r.out.substr(0, r.out.find('\n'));
  if (mode == Mode::kRoles) {
    std::string second = r.out.substr(out.size() + 1);
    second = second.substr(0, second.find('\n'));
    m_reader_access_key = second.substr(0, second.find(' '));
    m_reader_secret_key = second.substr(second.find(' ') + 1);
  }
  if (mode != Mode::kRole) {
    m_access_key = out.substr(0, out.find(' '));
    m_secret_key = out.substr(out.find(' ') + 1);
  } else {
    m_role_arn = out;
  }
}

S3Server::~S3Server() { m_process.reset(); }

// ---- tinyproxy

std::string TinyProxy::binary() { return find_program("tinyproxy", {"/usr/bin/tinyproxy"}); }

TinyProxy::TinyProxy(const std::string& dir) : m_dir(dir), m_port(free_port()) {
  // No Allow or ConnectPort lines: every local client, CONNECT to any port (nginx's is free).
  std::ofstream(m_dir + "/tinyproxy.conf") << "Port " << m_port << "\nListen 127.0.0.1\nTimeout 30\nMaxClients 16\nLogLevel Info\n"
                                           << "LogFile \"" << m_dir << "/tinyproxy.log\"\nPidFile \"" << m_dir << "/tinyproxy.pid\"\n";
  m_process = std::make_unique<ChildProcess>(std::vector<std::string>{binary(), "-d", "-c", m_dir + "/tinyproxy.conf"},
                                             std::map<std::string, std::string>{}, m_dir + "/tinyproxy.out", m_dir + "/tinyproxy.err");
  if (!wait_for_port(m_port))
    throw std::runtime_error("tinyproxy did not start on port " + std::to_string(m_port) + ": " + read_text(m_dir + "/tinyproxy.err") +
                             read_text(m_dir + "/tinyproxy.log"));
}

TinyProxy::~TinyProxy() { m_process.reset(); }

// ---- stunnel

std::string StunnelClient::binary() { return find_program("stunnel", {"/usr/bin/stunnel", "/usr/bin/stunnel4"}); }

StunnelClient::StunnelClient(const std::string& dir, int server_port, const std::string& ca_file) : m_dir(dir), m_port(free_port()) {
  std::ofstream(m_dir + "/stunnel.conf") << "foreground = yes\npid =\noutput = " << m_dir << "/stunnel.log\n[redis]\nclient = yes\n"
                                         << "accept = 127.0.0.1:" << m_port << "\nconnect = 127.0.0.1:" << server_port
                                         << "\nCAfile = " << ca_file << "\nverifyChain = yes\ncheckIP = 127.0.0.1\n";
  m_process = std::make_unique<ChildProcess>(std::vector<std::string>{binary(), m_dir + "/stunnel.conf"}, std::map<std::string, std::string>{},
                                             m_dir + "/stunnel.out", m_dir + "/stunnel.err");
  if (!wait_for_port(m_port))
    throw std::runtime_error("stunnel did not start on port " + std::to_string(m_port) + ": " + read_text(m_dir + "/stunnel.err") +
                             read_text(m_dir + "/stunnel.log"));
}

StunnelClient::~StunnelClient() { m_process.reset(); }

// ---- the proxy

FaultProxy::FaultProxy(int upstream_port) : m_upstream(upstream_port) {
  m_listen = listen_socket(0);
  m_port = bound_port(m_listen);
  m_acceptor = std::thread([this] { accept_loop(); });
}

FaultProxy::~FaultProxy() {
  m_stop = true;
  m_acceptor.join();
  {
    std::lock_guard lock(m_mutex);
    for (int fd : m_sockets) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : m_threads) t.join();
  ::close(m_listen);
}

void FaultProxy::set(Fault fault, size_t amount) {
  m_amount = amount;
  m_fault = fault;
}

void FaultProxy::accept_loop() {
  while (!m_stop) {
    pollfd p{m_listen, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int client = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    ++m_connections;
    std::lock_guard lock(m_mutex);
    m_sockets.push_back(client);
    m_threads.emplace_back([this, client] { serve(client); });
  }
}

void FaultProxy::serve(int client) {
  relay(client);
  forget(client);
}

void FaultProxy::relay(int client) {
  Fault fault = m_fault.load();
  size_t amount = m_amount.load();
  auto wait_readable = [&](int fd) {
    while (!m_stop) {
      pollfd p{fd, POLLIN, 0};
      int n = ::poll(&p, 1, 50);
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return false;
    }
    return false;
  };
  if (fault == Fault::kRefuse) return;
  char buf[64 << 10];
  if (fault == Fault::kSilent) {
    while (wait_readable(client) && ::recv(client, buf, sizeof buf, 0) > 0) {
    }
    return;
  }
  int server = connect_loopback(m_upstream);
  if (server < 0) return;
  {
    std::lock_guard lock(m_mutex);
    m_sockets.push_back(server);
  }
  std::thread upward([&] {
    std::vector<char> up(64 << 10);
    while (wait_readable(client)) {
      ssize_t n = ::recv(client, up.data(), up.size(), 0);
      if (n <= 0 || !send_all(server, up.data(), static_cast<size_t>(n))) break;
    }
    ::shutdown(server, SHUT_WR);
  });
  size_t passed = 0;
  for (;;) {
    if (!wait_readable(server)) break;
    ssize_t n = ::recv(server, buf, sizeof buf, 0);
    if (n <= 0) break;
    size_t len = static_cast<size_t>(n);
    if (fault == Fault::kDelay) std::this_thread::sleep_for(std::chrono::milliseconds(amount));
    if (fault == Fault::kFlip && amount >= passed && amount < passed + len) buf[amount - passed] ^= 0xff;
    if (fault == Fault::kTruncate && passed + len > amount) {
      send_all(client, buf, amount - passed);
      break;
    }
    if (fault == Fault::kStall && passed + len > amount) {
      send_all(client, buf, amount - passed);
      while (wait_readable(server) && ::recv(server, buf, sizeof buf, 0) > 0) {
      }
      break;
    }
    if (!send_all(client, buf, len)) break;
    passed += len;
  }
  ::shutdown(client, SHUT_RDWR);
  ::shutdown(server, SHUT_RDWR);
  upward.join();
  forget(server);
}

void FaultProxy::forget(int fd) {
  std::lock_guard lock(m_mutex);
  m_sockets.erase(std::remove(m_sockets.begin(), m_sockets.end(), fd), m_sockets.end());
  ::close(fd);
}

std::vector<BadCertificate> bad_certificates(const TestCa& trusted, const std::string& dir) {
  TestCa other(dir, "another CA");  // its files stay in `dir`
  return {{"another CA", other.issue("foreign", "IP:127.0.0.1"), "not signed by a CA this node trusts"},
          {"expired", trusted.issue("expired", "IP:127.0.0.1,DNS:localhost", -1), "has expired"},
          {"issued for another name", trusted.issue("misnamed", "DNS:cache.example.org"), "not issued for 127.0.0.1"}};
}

}  // namespace kiln::testing
