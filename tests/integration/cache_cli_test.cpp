// The cache as a user and a cluster of processes meet it: `kiln cache` commands, one
// compile per key across processes, and a cache that cannot be used.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::run_process;

std::vector<std::string> kiln(const std::string& cache, std::initializer_list<std::string> args) {
  std::vector<std::string> argv{testing::kiln_binary(), "--cache-dir", cache};
  argv.insert(argv.end(), args);
  return argv;
}

// Private user and mount namespaces, for a real full or read-only file system in a test.
bool namespaces_available() { return run_process({"unshare", "-rm", "true"}).exit_code == 0; }

TEST(CacheCliTest, EightProcessesFiftyRequestsTenKeysCompileTenTimes) {
  testing::TempDir specs, cache;
  testing::write_variant_specs(specs.path(), 10);
  std::vector<pid_t> children;
  for (int p = 0; p < 8; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // 5 rounds of `warm` over the 10 specs: 50 requests per process.
      std::string loop = "for i in 1 2 3 4 5; do " + testing::kiln_binary() + " --cache-dir " + cache.path() +
                         " warm --spec-dir " + specs.path() + " >/dev/null || exit 1; done";
      ::execl("/bin/sh", "sh", "-c", loop.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto stats = run_process(kiln(cache.path(), {"cache", "stats", "--json"}));
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(testing::json_int(stats.out, "compiles"), 10) << stats.out;
  EXPECT_EQ(testing::json_int(stats.out, "hits") + testing::json_int(stats.out, "compiles"), 400) << stats.out;
  // Every result verified: the blobs check out, and every op passes its self-check.
  auto verify = run_process(kiln(cache.path(), {"cache", "verify"}));
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  auto check = run_process(kiln(cache.path(), {"warm", "--check", "--spec-dir", specs.path()}));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_EQ(check.out.find("miss"), std::string::npos) << check.out;
}

TEST(CacheCliTest, StatsLsShowGcVerifyClear) {
  testing::TempDir cache;
  ASSERT_EQ(run_process(kiln(cache.path(), {"warm"})).exit_code, 0);
  ASSERT_EQ(run_process(kiln(cache.path(), {"warm"})).exit_code, 0);
  auto stats = run_process(kiln(cache.path(), {"cache", "stats", "--json"}));
  for (const char* field : {"hits", "misses", "compiles", "evictions", "repairs", "bytes"})
    EXPECT_GE(testing::json_int(stats.out, field), 0) << field << " in " << stats.out;
  const int64_t ops = static_cast<int64_t>(testing::bundled_op_names().size());
  EXPECT_EQ(testing::json_int(stats.out, "compiles"), ops);
  EXPECT_EQ(testing::json_int(stats.out, "hits"), ops);

  auto ls = run_process(kiln(cache.path(), {"cache", "ls", "--op", "axpby"}));
  EXPECT_EQ(ls.exit_code, 0);
  EXPECT_NE(ls.out.find("axpby"), std::string::npos);
  EXPECT_EQ(ls.out.find("row_softmax"), std::string::npos);
  std::smatch m;
  auto ls_json = run_process(kiln(cache.path(), {"cache", "ls", "--op", "axpby", "--json"}));
  ASSERT_TRUE(std::regex_search(ls_json.out, m, std::regex("\"key\":\"([0-9a-f]{32})\""))) << ls_json.out;
  std::string key = m[1];
  auto show = run_process(kiln(cache.path(), {"cache", "show", key.substr(0, 10)}));
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("op           axpby"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("define") == std::string::npos ? show.out.find("target = cpu:") : 0, std::string::npos);
  EXPECT_EQ(run_process(kiln(cache.path(), {"cache", "show", "0000000000"})).exit_code, 1);

  // Damage one blob: verify says so and exits 1; the entry is gone and recompiles.
  std::string blob = cache / ("blobs/" + key.substr(0, 2) + "/" + key + ".blob");
  std::string bytes = testing::read_text(blob);
  bytes[bytes.size() / 2] ^= 0x5a;
  testing::TempDir scratch;
  std::ofstream(blob, std::ios::binary | std::ios::trunc) << bytes;
  auto verify = run_process(kiln(cache.path(), {"cache", "verify"}));
  EXPECT_EQ(verify.exit_code, 1);
  EXPECT_NE(verify.err.find(key), std::string::npos) << verify.err;
  EXPECT_EQ(run_process(kiln(cache.path(), {"cache", "verify"})).exit_code, 0);
  auto repair = run_process(kiln(cache.path(), {"cache", "verify", "--repair", "--json"}));
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(testing::json_int(repair.out, "unindexed"), 0) << repair.out;
  EXPECT_EQ(testing::json_int(repair.out, "adopted"), 0) << repair.out;

  // Everything left goes (the ops' artifacts and the precompiled headers they share).
  int64_t stored = testing::json_int(run_process(kiln(cache.path(), {"cache", "stats", "--json"})).out, "artifacts");
  EXPECT_GE(stored, ops - 1);
  auto gc = run_process(kiln(cache.path(), {"cache", "gc", "--max-size", "1", "--json"}));
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_EQ(testing::json_int(gc.out, "evicted"), stored);
  EXPECT_EQ(testing::json_int(gc.out, "bytes"), 0);
  EXPECT_EQ(run_process(kiln(cache.path(), {"cache", "gc", "--max-size", "lots"})).exit_code, 2);

  ASSERT_EQ(run_process(kiln(cache.path(), {"warm"})).exit_code, 0);
  stored = testing::json_int(run_process(kiln(cache.path(), {"cache", "stats", "--json"})).out, "artifacts");
  auto clear = run_process(kiln(cache.path(), {"cache", "clear", "--json"}));
  EXPECT_EQ(testing::json_int(clear.out, "removed"), stored);
  EXPECT_EQ(testing::json_int(run_process(kiln(cache.path(), {"cache", "stats", "--json"})).out, "bytes"), 0);
}

// Every folder the command makes for a new cache (and above it) is private, whichever command
// comes first.
TEST(CacheCliTest, EveryFolderTheCommandMakesIsPrivate) {
  testing::TempDir top;
  for (auto& first : std::vector<std::vector<std::string>>{{"cache", "stats"}, {"build", testing::bundled_spec_dir() + "/axpby.toml"}}) {
    std::string cache = top / (first[0] + "/new/cache");
    std::vector<std::string> argv{testing::kiln_binary(), "--cache-dir", cache};
    argv.insert(argv.end(), first.begin(), first.end());
    auto r = run_process(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  ASSERT_EQ(run_process(kiln(top / "cache/new/cache", {"build", testing::bundled_spec_dir() + "/axpby.toml"})).exit_code, 0);
  std::vector<std::string> open;
  for (auto& e : std::filesystem::recursive_directory_iterator(top.path()))
    if (e.is_directory() && (e.status().permissions() & std::filesystem::perms::all) != std::filesystem::perms::owner_all)
      open.push_back(e.path().string());
  EXPECT_TRUE(open.empty()) << open.front();
  EXPECT_TRUE(std::filesystem::exists(top / "build/new/cache/manifests"));
}

TEST(CacheCliTest, ExplainNamesTheHeaderAndTheDefineThatChanged) {
  testing::TempDir specs, cache;
  testing::copy_bundled_specs(specs.path());
  std::string spec = specs / "axpby.toml";
  ASSERT_EQ(run_process(kiln(cache.path(), {"build", spec})).exit_code, 0);
  auto cached = run_process(kiln(cache.path(), {"cache", "explain", spec}));
  EXPECT_NE(cached.out.find("is cached"), std::string::npos) << cached.out;

  specs.write("include/kiln_ops/common.h", testing::read_text(specs / "include/kiln_ops/common.h") + "// changed\n");
  auto header = run_process(kiln(cache.path(), {"cache", "explain", spec}));
  EXPECT_EQ(header.exit_code, 0) << header.err;
  EXPECT_NE(header.out.find("header spec:include/kiln_ops/common.h: content differs"), std::string::npos) << header.out;

  std::string text = testing::read_text(spec);
  text.replace(text.find("include_dirs = [\"include\"]"), 26, "include_dirs = [\"include\"]\ndefines = [\"FAST=1\"]");
  specs.write("axpby.toml", text);
  auto define = run_process(kiln(cache.path(), {"cache", "explain", spec, "--json"}));
  EXPECT_NE(define.out.find("define: (none) -> 'FAST=1'"), std::string::npos) << define.out;
}

TEST(CacheCliTest, AFailureIsCachedAndServedWithoutCompiling) {
  testing::TempDir specs, cache;
  specs.write("bad.toml", "name = \"bad\"\nlanguage = \"cpp\"\nsources = [\"bad.cpp\"]\n[[entry]]\nname = \"bad\"\nparams = []\n");
  specs.write("bad.cpp", "#include <kiln/cpu_kernel.h>\nvoid bad(const kiln::cpu::Block&) { oops; }\n");
  auto first = run_process(kiln(cache.path(), {"build", specs / "bad.toml", "--json"}));
  auto second = run_process(kiln(cache.path(), {"build", specs / "bad.toml"}));
  EXPECT_EQ(first.exit_code, 1);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("bad.cpp:2:37: error: use of undeclared identifier 'oops'"), std::string::npos) << second.err;
  auto stats = run_process(kiln(cache.path(), {"cache", "stats", "--json"}));
  EXPECT_EQ(testing::json_int(stats.out, "compiles"), 1) << stats.out;
}

TEST(CacheCliTest, ACacheThatCannotBeOpenedWarnsOnceAndOpsStillRun) {
  testing::TempDir dir;
  dir.write("not-a-folder", "a file where the cache folder should be");
  auto r = run_process(kiln(dir / "not-a-folder", {"run", "vector_add"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(": ok"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("kiln: warning: cannot use the kiln cache"), std::string::npos) << r.err;
}

TEST(CacheCliTest, AFullDiskWarnsOnceAndOpsStillRun) {
  // A real full file system: a 256 KiB tmpfs in a private mount namespace, filled up after
  // the index is created.
  if (!namespaces_available()) GTEST_SKIP() << "no user and mount namespaces here (unshare -rm)";
  testing::TempDir dir;
  std::string kiln_cmd = testing::kiln_binary() + " --cache-dir " + dir.path() + "/fs/cache";
  std::string script = "mkdir -p " + dir.path() + "/fs && mount -t tmpfs -o size=256k tmpfs " + dir.path() + "/fs && " +
                       kiln_cmd + " cache stats >/dev/null && (dd if=/dev/zero of=" + dir.path() +
                       "/fs/filler bs=4k 2>/dev/null; true) && " + kiln_cmd + " run axpby";
  auto r = run_process({"unshare", "-rm", "/bin/sh", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(": ok"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("cannot be written"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  size_t first = r.err.find("kiln: warning:");
  EXPECT_EQ(r.err.find("kiln: warning:", first + 1), std::string::npos) << "warned more than once:\n" << r.err;
}

TEST(CacheCliTest, AReadOnlyCacheWarnsOnceAndOpsStillRun) {
  // Really read-only (EROFS), even for root: a read-only bind mount in a private namespace.
  if (!namespaces_available()) GTEST_SKIP() << "no user and mount namespaces here (unshare -rm)";
  testing::TempDir cache;
  ASSERT_EQ(run_process(kiln(cache.path(), {"build", testing::bundled_spec_dir() + "/axpby.toml"})).exit_code, 0);
  std::string script = "mount --bind -o ro " + cache.path() + " " + cache.path() + " && mount -o remount,bind,ro " +
                       cache.path() + " ; " + testing::kiln_binary() + " --cache-dir " + cache.path() +
                       " warm --check";
  auto r = run_process({"unshare", "-rm", "/bin/sh", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("axpby"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("kiln: warning:"), std::string::npos) << r.err;
  size_t first = r.err.find("kiln: warning:");
  EXPECT_EQ(r.err.find("kiln: warning:", first + 1), std::string::npos) << "warned more than once:\n" << r.err;
}

}  // namespace
}  // namespace kiln
