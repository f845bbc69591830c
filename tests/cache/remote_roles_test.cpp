// Server-side roles (issue 44): a reader's credentials may read but not write, and the server,
// not the client, enforces it. Against real servers: redis-server with ACL users, nginx with
// PUT for one basic-auth user, moto's S3 with IAM policies. A refused write is
// kPermissionDenied at the endpoint, and a RemoteTiers holding a reader's credentials publishes
// nothing and says so once. docs/SECURITY-roles.md gives the same ACLs, config and policies.
//
// And what a server says is bounded before it is kept: a fake server declaring a 3 GiB Redis
// bulk, a 2-billion-element array, a 3 GiB Content-Length, is refused by a client whose address
// space may grow by 128 MiB at most (a forked child under RLIMIT_AS).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "cache/remote.h"
#include "tests/cache/remote_test_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using kiln::testing::NginxOptions;
using kiln::testing::NginxServer;
using kiln::testing::RedisServer;
using kiln::testing::S3Server;
using kiln::testing::TempDir;
using namespace std::chrono_literals;

#define REQUIRE_REDIS() \
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)"

// The two Redis users of docs/SECURITY-roles.md. A reader runs only commands that read: GET of
// any kiln key (objects and leases), EXISTS of a lease, SUBSCRIBE to a lease's channel and
// PUBSUB NUMSUB; a publisher also writes objects and holds leases (SET, and EVAL of the renew
// and release scripts, whose PEXPIRE, DEL and PUBLISH the ACL checks too).
const std::vector<std::string> k_reader_acl = {"on",       ">reader-pw", "resetkeys", "resetchannels", "~kiln:*", "&kiln:lease:*",
                                               "-@all",    "+get",       "+exists",   "+ping",         "+subscribe",
                                               "+pubsub|numsub"};
const std::vector<std::string> k_publisher_acl = {
    "on",     ">publisher-pw", "resetkeys", "resetchannels", "~kiln:*",    "&kiln:lease:*",   "-@all", "+get", "+exists",
    "+ping",  "+set",          "+eval",     "+pexpire",      "+del",       "+publish",        "+subscribe", "+pubsub|numsub"};

std::string base64(std::string_view in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<uint8_t>(in[i + 2]);
    out += k[v >> 18 & 63];
    out += k[v >> 12 & 63];
    out += i + 1 < in.size() ? k[v >> 6 & 63] : '=';
    out += i + 2 < in.size() ? k[v & 63] : '=';
  }
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::unique_ptr<RemoteEndpoint> endpoint(const std::string& url, EndpointOptions eo = {}) {
  eo.connect_timeout = 1000ms;
  eo.io_timeout = 3000ms;
  auto parsed = parse_endpoint_url(url);
  if (!parsed.ok()) throw std::runtime_error(parsed.status().message());
  auto e = make_endpoint(*parsed, eo);
  if (!e.ok()) throw std::runtime_error(e.status().message());
  return std::move(e).value();
}

// What a RemoteTiers said through its report callback, by kind.
struct Reports {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> said;
  int of_kind(const std::string& prefix) {
    std::lock_guard lock(mutex);
    int n = 0;
    for (auto& [kind, message] : said) n += kind.rfind(prefix, 0) == 0;
    return n;
  }
  std::string all() {
    std::lock_guard lock(mutex);
    std::string out;
    for (auto& [kind, message] : said) out += kind + ": " + message + "\n";
    return out;
  }
};

std::unique_ptr<RemoteTiers> tiers(const std::string& tier, Reports& reports) {
  RemoteOptions o;
  o.tiers = parse_tiers(tier).value();
  o.connect_timeout = 1000ms;
  o.io_timeout = 3000ms;
  o.chunk_threshold = 64 << 10;
  o.chunk_bytes = 16 << 10;
  o.report = [&reports](const std::string& kind, const std::string& message) {
    std::lock_guard lock(reports.mutex);
    reports.said.emplace_back(kind, message);
  };
  auto t = RemoteTiers::create(std::move(o));
  if (!t.ok()) throw std::runtime_error(t.status().message());
  return std::move(t).value();
}

// A file only its owner reads (as a tier's credential files must be).
std::string secret_file(const TempDir& dir, const std::string& name, const std::string& content) {
  std::string path = dir / name;
  std::ofstream(path) << content << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

// Six artifacts for a tier to publish: five small, one large enough to travel as chunks.
std::vector<RemoteTiers::Publication> six_artifacts() {
  std::vector<RemoteTiers::Publication> out;
  for (int i = 0; i < 5; ++i) out.push_back({RemoteObject::kArtifact, xxh3_128("artifact " + std::to_string(i)), noise(3000 + i, i)});
  out.push_back({RemoteObject::kArtifact, xxh3_128("a large one"), noise(200 << 10, 99)});
  return out;
}

// A reader's RemoteTiers publishes `objects`: nothing is published, it is said once (a report of
// kind "read-only ..."), and what the publisher had published is still read.
void expect_reader_publishes_nothing(RemoteTiers& reader, Reports& reports, RemoteTiers& publisher) {
  auto objects = six_artifacts();
  publisher.publish(objects);
  publisher.drain();
  auto published = counters_of(publisher);
  EXPECT_EQ(published[TierCounter::kErrors], 0);
  EXPECT_GE(published[TierCounter::kPublished], static_cast<int64_t>(objects.size()));
  for (int round = 0; round < 2; ++round) {  // twice: the second round is not even tried
    reader.publish(objects);
    reader.drain();
  }
  auto by = counters_of(reader);
  EXPECT_EQ(by[TierCounter::kPublished], 0) << reports.all();
  EXPECT_EQ(reports.of_kind("read-only"), 1) << "said once, not once per artifact:\n" << reports.all();
  EXPECT_EQ(by[TierCounter::kErrors], 0) << "a refused write is not a failing server:\n" << reports.all();
  for (auto& o : objects) EXPECT_EQ(fetch_whole(reader, o.key), o.payload) << "reads go on:\n" << reports.all();
  EXPECT_EQ(counters_of(reader)[TierCounter::kHits], static_cast<int64_t>(objects.size()));
}

// ---- Redis ACL users

class RedisRolesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_REDIS();
    m_redis = std::make_unique<RedisServer>(m_dir.path());
    auto setuser = [&](const std::string& user, const std::vector<std::string>& acl) {
      std::vector<std::string> args{"ACL", "SETUSER", user};
      args.insert(args.end(), acl.begin(), acl.end());
      m_redis->cli(args);
    };
    setuser("reader", k_reader_acl);
    setuser("publisher", k_publisher_acl);
    m_redis->cli({"ACL", "SETUSER", "default", "off"});  // no one unnamed (the last command as the default user)
    m_host = "127.0.0.1:" + std::to_string(m_redis->port());
  }
  TempDir m_dir;
  std::unique_ptr<RedisServer> m_redis;
  std::string m_host;
};

TEST(RedisUrl, NamesAnAclUserKeepsNoCredentialsInTheLabelAndHttpStillRefusesThem) {
  auto url = parse_endpoint_url("redis://reader:p%40ss%3Aw@10.0.0.7:6380/2");
  ASSERT_TRUE(url.ok()) << url.status().message();
  EXPECT_EQ(url->username, "reader");
  EXPECT_EQ(url->password, "p@ss:w");
  EXPECT_EQ(url->host, "10.0.0.7");
  EXPECT_EQ(url->port, 6380);
  EXPECT_EQ(url->db, 2);
  EXPECT_EQ(url->text, "redis://10.0.0.7:6380/2") << "the label (and rendezvous rank) of the reader's and publisher's URL agree";
  auto user_only = parse_endpoint_url("redis://reader@h");
  ASSERT_TRUE(user_only.ok());
  EXPECT_EQ(user_only->username, "reader");
  EXPECT_EQ(user_only->password, "");
  EXPECT_EQ(user_only->text, parse_endpoint_url("redis://h")->text);
  for (const char* bad : {"redis://:secret@h", "redis://u:p%4@h", "redis://u:secret@h:99999"}) {
    auto r = parse_endpoint_url(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_FALSE(has(r.status().message(), "secret")) << "a password is never repeated: " << r.status().message();
  }
  EXPECT_TRUE(has(parse_endpoint_url("http://u:p@h/").status().message(), "credentials in a URL"));
  EXPECT_TRUE(has(parse_endpoint_url("redis://:pw@h").status().message(), "credentials in a URL"));
}

TEST_F(RedisRolesTest, AReaderReadsAndWatchesLeasesButItsWritesAreRefusedAsPermissionDenied) {
  EndpointOptions from_file;
  from_file.password = "publisher-pw";  // as |password-file= gives it
  auto publisher = endpoint("redis://publisher@" + m_host, from_file);
  auto reader = endpoint("redis://reader:reader-pw@" + m_host);  // inline, as the issue writes it
  std::string name(64, 'a');
  ASSERT_TRUE(publisher->put(name, "published").ok());
  auto got = reader->get(name);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->value_or(""), "published");
  Status refused = reader->put(name, "forged");
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.message();
  for (const char* part : {"redis://127.0.0.1", "user 'reader'", "SET kiln:aaaa", "NOPERM"})
    EXPECT_TRUE(has(refused.message(), part)) << part << " in: " << refused.message();
  EXPECT_FALSE(has(refused.message(), "reader-pw"));
  EXPECT_EQ(publisher->get(name)->value_or(""), "published");
  // A value past the first allocation (4 MiB and some) grows as its bytes arrive, whole.
  std::string big = noise((10 << 20) + 3, 7), big_name(64, '9');
  ASSERT_TRUE(publisher->put(big_name, big).ok());
  EXPECT_TRUE(reader->get(big_name)->value_or("") == big);

  // Leases: the publisher holds one; the reader sees it held and is woken by its release, but
  // takes none (its lease attempt is refused as kPermissionDenied, not a server down).
  ASSERT_TRUE(publisher->take_lease("lease:x", "publisher", 5000ms).value());
  EXPECT_TRUE(reader->lease_held("lease:x").value());
  auto watch = reader->watch_lease("lease:x");
  ASSERT_TRUE(watch.ok()) << watch.status().message();
  EXPECT_EQ(reader->lease_watchers("lease:x").value(), 1);
  auto taken = reader->take_lease("lease:y", "reader", 5000ms);
  EXPECT_EQ(taken.status().code(), StatusCode::kPermissionDenied) << taken.status().message();
  EXPECT_TRUE(has(taken.status().message(), "SET NX kiln:lease:y")) << taken.status().message();
  EXPECT_EQ(reader->release_lease("lease:x", "publisher").code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(publisher->release_lease("lease:x", "publisher").ok());
  EXPECT_TRUE((*watch)->wait(3000ms).value());
  EXPECT_FALSE(reader->lease_held("lease:x").value());
}

TEST_F(RedisRolesTest, AWrongPasswordOrNoneFailsReadsAndIsPermissionDeniedForWrites) {
  EndpointOptions wrong;
  wrong.password = "not-it";
  auto e = endpoint("redis://reader@" + m_host, wrong);
  auto got = e->get(std::string(64, 'b'));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << "a node that cannot read is skipped and said, like a server down";
  EXPECT_TRUE(has(got.status().message(), "WRONGPASS") && has(got.status().message(), "user 'reader'")) << got.status().message();
  EXPECT_EQ(e->put(std::string(64, 'b'), "x").code(), StatusCode::kPermissionDenied);
  auto anonymous = endpoint("redis://" + m_host);  // the default user is off
  auto none = anonymous->get(std::string(64, 'b'));
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(has(none.status().message(), "NOAUTH") && has(none.status().message(), "password-file")) << none.status().message();
  EXPECT_EQ(anonymous->put(std::string(64, 'b'), "x").code(), StatusCode::kPermissionDenied);
  EndpointOptions both;
  both.password = "publisher-pw";
  EXPECT_FALSE(make_endpoint(parse_endpoint_url("redis://publisher:other@" + m_host).value(), both).ok())
      << "two different passwords for one endpoint";
}

TEST_F(RedisRolesTest, AReadersTiersPublishNothingSayItOnceReadOnAndHoldNoLease) {
  std::string reader_file = secret_file(m_dir, "reader.pw", "reader-pw");
  std::string publisher_file = secret_file(m_dir, "publisher.pw", "publisher-pw");
  Reports reader_says, publisher_says;
  auto publisher = tiers("redis://publisher@" + m_host + "|password-file=" + publisher_file, publisher_says);
  auto reader = tiers("redis://reader@" + m_host + "|password-file=" + reader_file, reader_says);
  ASSERT_TRUE(reader->has_leases()) << "a reader waits for holders";
  Hash128 input = xxh3_128("inputs");
  // Its first lease attempt is refused: said once, and it holds no lease from then on.
  EXPECT_EQ(reader->take_lease(input).state, RemoteTiers::LeaseState::kNone);
  EXPECT_EQ(reader_says.of_kind("read-only"), 1) << reader_says.all();
  EXPECT_TRUE(has(reader_says.all(), "NOPERM")) << reader_says.all();
  expect_reader_publishes_nothing(*reader, reader_says, *publisher);

  // No one holds the lease: the reader compiles at once, holding none (the publisher then can).
  auto none = reader->wait_for_holder(input, 5000ms, [] { return false; });
  EXPECT_EQ(none.state, RemoteTiers::WaitState::kNone);
  // The publisher holds it: the reader waits without writing, woken by the release, and finds
  // what the publisher published.
  auto lease = publisher->take_lease(input);
  ASSERT_EQ(lease.state, RemoteTiers::LeaseState::kTaken) << "the reader left the lease free";
  std::atomic<bool> published{false};
  RemoteTiers::WaitResult waited;
  std::thread waiter([&] {
    waited = reader->wait_for_holder(input, 10000ms, [&] {
      return reader->fetch(RemoteObject::kManifest, input, [](std::string_view p) {
        return p == "a manifest" ? Status() : Status(StatusCode::kDataLoss, "not it");
      });
    });
  });
  std::this_thread::sleep_for(300ms);
  publisher->publish({{RemoteObject::kManifest, input, "a manifest"}});
  publisher->drain();
  lease.lease.reset();  // released: the watchers are woken
  waiter.join();
  EXPECT_EQ(waited.state, RemoteTiers::WaitState::kFound) << reader_says.all();
  EXPECT_EQ(reader_says.of_kind("read-only"), 1) << reader_says.all();
}

// ---- nginx: PUT for the publisher only

TEST(NginxRoles, AReadersPutIsRefusedAsPermissionDeniedAndItsGetServed) {
  if (NginxServer::binary().empty()) GTEST_SKIP() << "nginx is not installed (scripts/setup installs it)";
  TempDir dir;
  NginxOptions o;
  o.basic_user = "reader";
  o.basic_password = "reader-pw";
  o.publisher_user = "publisher";
  o.publisher_password = "publisher-pw";
  NginxServer nginx(dir.path(), o);
  EndpointOptions as_reader, as_publisher;
  as_reader.authorization = "Basic " + base64("reader:reader-pw");
  as_reader.http_user = "reader";  // as remote.cpp sets it from a basic-auth-file
  as_publisher.authorization = "Basic " + base64("publisher:publisher-pw");
  as_publisher.http_user = "publisher";
  auto reader = endpoint(nginx.url(), as_reader), publisher = endpoint(nginx.url(), as_publisher);
  std::string name(64, 'c');
  ASSERT_TRUE(publisher->put(name, "published").ok());
  EXPECT_EQ(reader->get(name)->value_or(""), "published");
  Status refused = reader->put(name, "forged");
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.message();
  for (const char* part : {"user 'reader'", "PUT /kiln/cccc", "HTTP 401", "may not write"})
    EXPECT_TRUE(has(refused.message(), part)) << part << " in: " << refused.message();
  EXPECT_EQ(publisher->get(name)->value_or(""), "published");
  auto anonymous = endpoint(nginx.url())->get(name);  // a read without credentials: a failure, said
  EXPECT_EQ(anonymous.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(has(anonymous.status().message(), "HTTP 401")) << anonymous.status().message();

  Reports reader_says, publisher_says;
  auto reader_tiers = tiers(nginx.url() + "|basic-auth-file=" + secret_file(dir, "reader", "reader:reader-pw"), reader_says);
  auto publisher_tiers = tiers(nginx.url() + "|basic-auth-file=" + secret_file(dir, "publisher", "publisher:publisher-pw"), publisher_says);
  expect_reader_publishes_nothing(*reader_tiers, reader_says, *publisher_tiers);
}

// ---- S3: an IAM policy that allows the reader s3:GetObject (and s3:ListBucket) only

// Sets the AWS credentials of one scope (keys, or a profile of a credentials file), restoring
// what was there.
class AwsEnv {
 public:
  explicit AwsEnv(const std::map<std::string, std::string>& vars) {
    for (const char* name : k_names) {
      const char* old = std::getenv(name);
      m_saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(name);
    }
    for (auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~AwsEnv() {
    for (auto& [name, value] : m_saved) value ? (void)::setenv(name.c_str(), value->c_str(), 1) : (void)::unsetenv(name.c_str());
  }

 private:
  static constexpr const char* k_names[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                                            "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_SHARED_CREDENTIALS_FILE",
                                            "AWS_REGION", "AWS_DEFAULT_REGION"};
  std::map<std::string, std::optional<std::string>> m_saved;
};

TEST(S3Roles, AReadersPutObjectIsRefusedAsPermissionDeniedAndItsGetServed) {
  if (S3Server::binary().empty()) GTEST_SKIP() << "moto_server is not installed (scripts/setup installs moto[server] into kiln's venv)";
  TempDir dir;
  S3Server s3(dir.path(), "kiln-roles", S3Server::Mode::kRoles);
  EndpointOptions eo;
  eo.s3_endpoint = s3.endpoint();
  std::string url = "s3://kiln-roles/c", name(64, 'd');
  {
    AwsEnv keys({{"AWS_ACCESS_KEY_ID", s3.access_key()}, {"AWS_SECRET_ACCESS_KEY", s3.secret_key()}});
    ASSERT_TRUE(endpoint(url, eo)->put(name, "published").ok());
  }
  {
    AwsEnv keys({{"AWS_ACCESS_KEY_ID", s3.reader_access_key()}, {"AWS_SECRET_ACCESS_KEY", s3.reader_secret_key()}});
    auto reader = endpoint(url, eo);
    auto got = reader->get(name);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->value_or(""), "published");
    auto missing = reader->get(std::string(64, 'e'));
    ASSERT_TRUE(missing.ok()) << "with s3:ListBucket, an object that is not there is a miss: " << missing.status().message();
    EXPECT_FALSE(missing->has_value());
    Status refused = reader->put(std::string(64, 'f'), "forged");
    EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.message();
    for (std::string part : {std::string("PUT /kiln-roles/c/ffff"), "access key " + s3.reader_access_key(),
                             std::string("403 AccessDenied"), std::string("s3:PutObject")})
      EXPECT_TRUE(has(refused.message(), part)) << part << " in: " << refused.message();
  }
  // Two nodes in one process: each tier keeps the profile it first read from the shared file.
  std::ofstream(dir / "credentials") << "[publisher]\naws_access_key_id = " << s3.access_key() << "\naws_secret_access_key = "
                                     << s3.secret_key() << "\n[reader]\naws_access_key_id = " << s3.reader_access_key()
                                     << "\naws_secret_access_key = " << s3.reader_secret_key() << "\n";
  Reports reader_says, publisher_says;
  std::string tier = url + "|endpoint=" + s3.endpoint();
  std::unique_ptr<RemoteTiers> reader_tiers, publisher_tiers;
  for (auto [profile, made, says] : {std::tuple{"publisher", &publisher_tiers, &publisher_says},
                                     std::tuple{"reader", &reader_tiers, &reader_says}}) {
    AwsEnv env({{"AWS_SHARED_CREDENTIALS_FILE", dir / "credentials"}, {"AWS_PROFILE", profile}});
    *made = tiers(tier, *says);
    ASSERT_TRUE((*made)->ping_all().front().status.ok()) << profile;
  }
  expect_reader_publishes_nothing(*reader_tiers, reader_says, *publisher_tiers);
  EXPECT_TRUE(has(reader_says.all(), "[reader]")) << reader_says.all();
}

// ---- replies bounded before they are kept

// Answers each connection with `answer` once its request came, then `filler` bytes of 'x',
// then closes it.
class FakeServer {
 public:
  FakeServer(std::string answer, size_t filler) : m_answer(std::move(answer)), m_filler(filler) {
    m_listen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(m_listen, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(m_listen, 8) != 0 ||
        ::getsockname(m_listen, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen");
    m_port = ntohs(a.sin_port);
    m_thread = std::thread([this] {
      for (;;) {
        int c = ::accept(m_listen, nullptr, nullptr);
        if (c < 0) return;
        char request[65536];
        (void)::recv(c, request, sizeof request, 0);
        std::string out = m_answer;
        std::string chunk(64 << 10, 'x');
        bool ok = ::send(c, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
        for (size_t sent = 0; ok && sent < m_filler; sent += chunk.size())
          ok = ::send(c, chunk.data(), std::min(chunk.size(), m_filler - sent), MSG_NOSIGNAL) > 0;
        ::close(c);
      }
    });
  }
  ~FakeServer() {
    ::shutdown(m_listen, SHUT_RDWR);
    ::close(m_listen);
    m_thread.join();
  }
  int port() const { return m_port; }

 private:
  std::string m_answer;
  size_t m_filler;
  int m_listen = -1, m_port = 0;
  std::thread m_thread;
};

// The bytes of address space this process maps now.
size_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// A "VmRSS:"-style field of /proc/self/status, in KiB.
long status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field, 0) == 0) return std::strtol(line.c_str() + field.size(), nullptr, 10);
  return -1;
}

struct Bounded {
  int exit_code = -1;       // 0: refused; 2: accepted; 3: threw (bad_alloc); 128 + signal when it died
  std::string message;      // the status the call answered
  long rss_growth_kib = 0;  // the child's peak resident memory (VmHWM) over its resident memory before the call
};

// Runs `call` in a forked child whose address space may grow by 128 MiB at most.
Bounded run_bounded(const TempDir& dir, const std::function<Status()>& call) {
  std::string out = dir / "message";
  pid_t pid = ::fork();
  if (pid == 0) {
    rlim_t limit = mapped_bytes() + (rlim_t{128} << 20);
    rlimit rl{limit, limit};
    ::setrlimit(RLIMIT_AS, &rl);
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to VmRSS
    long before = status_kib("VmRSS:");
    int code = 0;
    Status st;
    try {  // nothing of gtest's runs in the child
      st = call();
      code = st.ok() ? 2 : 0;
    } catch (const std::exception& e) {
      st = Status(StatusCode::kInternal, std::string("threw ") + e.what());
      code = 3;
    }
    std::ofstream(out) << status_kib("VmHWM:") - before << "\n" << st.message();
    ::_exit(code);
  }
  Bounded b;
  int status = 0;
  ::waitpid(pid, &status, 0);
  b.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::string said = kiln::testing::read_text(out);
  b.rss_growth_kib = std::strtol(said.c_str(), nullptr, 10);
  b.message = said.substr(said.find('\n') + 1);
  return b;
}

struct Bomb {
  const char* what;
  std::string scheme;  // "redis" or "http"
  std::string answer;
  size_t filler;
  size_t max_object_bytes;
  std::function<Status(RemoteEndpoint&)> call;
  const char* says;
};

TEST(BoundedReplies, DeclaredLengthsAndCountsAreRefusedBeforeTheyAreAllocated) {
  TempDir dir;
  auto get = [](RemoteEndpoint& e) { return e.get(std::string(64, 'g'), SIZE_MAX).status(); };
  // A chunk's GET is bounded by the size its chunk list says (here 100 KiB), not by the cap.
  auto get_chunk = [](RemoteEndpoint& e) { return e.get(std::string(64, 'c'), 100 << 10).status(); };
  const size_t cap = size_t{2} << 30;  // the default
  std::vector<Bomb> bombs = {
      {"a 3 GiB Redis bulk", "redis", "$3000000000\r\n", 1 << 20, cap, get, "answered a length of 3000000000 bytes"},
      {"a 1.5 GiB Redis bulk, cut after 1 MiB", "redis", "$1500000000\r\n", 1 << 20, cap, get,
       "closed the connection after 1048576 of the value's 1500000000 bytes"},
      {"a Redis value over a 1 MiB cap", "redis", "$2000000\r\n", 2000000, 1 << 20, get, "more than the 1048576"},
      {"a 2 MB Redis value for a 100 KiB chunk", "redis", "$2000000\r\n", 2000000, cap, get_chunk, "more than the 102400"},
      {"a 2-billion-element array", "redis", "*2000000000\r\n", 1 << 20, cap,
       [](RemoteEndpoint& e) { return e.lease_watchers("lease:x").status(); }, "an array of 2000000000 elements"},
      {"a 3 GiB bulk for SET", "redis", "$3000000000\r\n", 0, cap,
       [](RemoteEndpoint& e) { return e.put(std::string(64, 'g'), "x"); }, "a string of 3000000000 bytes"},
      {"a 3 GiB Content-Length", "http", "HTTP/1.1 200 OK\r\nContent-Length: 3000000000\r\n\r\n", 1 << 20, cap, get,
       "more than 2147483648 bytes"},
      {"a 1.5 GiB Content-Length, cut after 1 MiB", "http", "HTTP/1.1 200 OK\r\nContent-Length: 1500000000\r\n\r\n", 1 << 20, cap,
       get, "transfer closed with 1498951424 bytes remaining"},
      {"an endless body over a 1 MiB cap", "http", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 3 << 20, 1 << 20, get,
       "more than 1048576 bytes"},
      {"an endless body for a 100 KiB chunk", "http", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 3 << 20, cap, get_chunk,
       "more than 102400 bytes"},
  };
  for (auto& bomb : bombs) {
    FakeServer server(bomb.answer, bomb.filler);
    std::string url = bomb.scheme + "://127.0.0.1:" + std::to_string(server.port()) + (bomb.scheme == "http" ? "/kiln" : "");
    Bounded b = run_bounded(dir, [&] {
      EndpointOptions eo;
      eo.max_object_bytes = bomb.max_object_bytes;
      eo.io_timeout = 3000ms;
      auto e = make_endpoint(parse_endpoint_url(url).value(), eo);
      return e.ok() ? bomb.call(**e) : Status(StatusCode::kInternal, "");
    });
    EXPECT_EQ(b.exit_code, 0) << bomb.what << ": refused under a 128 MiB address-space limit (exit 2: accepted; "
                              << "134: aborted, out of memory): " << b.message;
    EXPECT_TRUE(has(b.message, bomb.says)) << bomb.what << ": " << b.message;
    EXPECT_LT(b.rss_growth_kib, 64 << 10) << bomb.what;
    std::printf("[ measured ] %s: refused, peak RSS +%ld KiB: %s\n", bomb.what, b.rss_growth_kib,
                b.message.c_str());
  }
}

}  // namespace
}  // namespace kiln::cache
