// `kiln warm` as an image build or a job's prologue runs it: a target matrix with pairs that
// cannot be built and ops that fail, reported without stopping the rest; and interrupted (a
// SIGKILL, a Ctrl-C) in the middle, losing nothing finished and resuming with only what is missing.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <regex>
#include <thread>

#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::run_process;
using testing::TempDir;

std::vector<std::string> kiln(const std::string& cache, std::initializer_list<std::string> args) {
  std::vector<std::string> argv{testing::kiln_binary(), "--cache-dir", cache};
  argv.insert(argv.end(), args);
  return argv;
}

struct Row {
  std::string source, status, reason;
};

// The rows of `kiln warm --json`, by "op target".
std::map<std::string, Row> rows(const std::string& json) {
  std::map<std::string, Row> out;
  std::regex object(R"re(\{"op":"([^"]*)","target":"([^"]*)"[^{}]*\})re");
  auto field = [](const std::string& obj, const std::string& name) {
    std::smatch m;
    return std::regex_search(obj, m, std::regex("\"" + name + "\":\"((?:[^\"\\\\]|\\\\.)*)\"")) ? m[1].str() : std::string();
  };
  for (std::sregex_iterator it(json.begin(), json.end(), object), end; it != end; ++it) {
    std::string obj = (*it)[0];
    out[(*it)[1].str() + " " + (*it)[2].str()] = {field(obj, "source"), field(obj, "status"), field(obj, "reason")};
  }
  return out;
}

size_t count_source(const std::map<std::string, Row>& r, const std::string& source) {
  size_t n = 0;
  for (auto& [_, row] : r) n += row.source == source;
  return n;
}

// Waits until `path` (a child's stderr) holds `text`, or the child is past the deadline.
bool wait_for_text(const std::string& path, const std::string& text, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (testing::read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

TEST(WarmCliTest, AMatrixReportsIncompatiblePairsAndFailuresAndBuildsTheRest) {
  TempDir specs, cache;
  testing::write_variant_specs(specs.path(), 2);
  // An op with no CUDA version, and one whose CPU source does not compile.
  std::string base = testing::read_text(specs / "variant0.toml");
  std::string cpu_only = base.substr(0, base.find("[cuda]"));
  cpu_only.replace(cpu_only.find("name = \"variant0\""), 17, "name = \"cpu_only\"");
  specs.write("cpu_only.toml", cpu_only);
  std::string broken = cpu_only;
  broken.replace(broken.find("name = \"cpu_only\""), 17, "name = \"broken\"");
  broken.replace(broken.find("kernels/vector_add.cpp"), 22, "kernels/broken.cpp");
  specs.write("broken.toml", broken);
  specs.write("kernels/broken.cpp", "extern \"C\" void vector_add(const float* a) {\n  return undeclared_name;\n}\n");

  auto r = run_process(
      kiln(cache.path(), {"warm", "--spec-dir", specs.path(), "--target", "cpu", "--target", "cuda:sm_80", "--json", "-q"}));
  EXPECT_EQ(r.exit_code, 1) << "a failed op makes the exit status 1\n" << r.out << r.err;
  auto report = rows(r.out);
  ASSERT_EQ(report.size(), 8u) << r.out;
  std::string cpu = "";
  for (auto& [key, row] : report)
    if (key.rfind("variant0 cpu:", 0) == 0) cpu = key.substr(9);
  ASSERT_FALSE(cpu.empty()) << r.out;
  for (const char* op : {"variant0", "variant1"}) {
    EXPECT_EQ(report[std::string(op) + " " + cpu].status, "ok") << r.out;
    EXPECT_EQ(report[std::string(op) + " " + cpu].source, "compiled") << r.out;
    EXPECT_EQ(report[std::string(op) + " cuda:sm_80"].status, "ok") << r.out;
  }
  EXPECT_EQ(report["cpu_only " + cpu].status, "ok") << r.out;
  EXPECT_EQ(report["cpu_only cuda:sm_80"].status, "incompatible") << r.out;
  EXPECT_NE(report["cpu_only cuda:sm_80"].reason.find("CUDA"), std::string::npos) << r.out;
  EXPECT_EQ(report["broken " + cpu].status, "failed") << r.out;
  EXPECT_NE(report["broken " + cpu].reason.find("undeclared_name"), std::string::npos) << r.out;
  // The diagnostics, with file and line, go to stderr; the summary counts every kind.
  EXPECT_NE(r.err.find("broken.cpp:2:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("8 of 8 pairs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(": 5 compiled, 0 already cached, 2 incompatible, 1 failed"), std::string::npos) << r.err;

  // Again: everything that could be built hits; the same failure, the same exit status.
  auto again = run_process(kiln(cache.path(), {"warm", "--spec-dir", specs.path(), "--target", "cpu", "--target", "cuda:sm_80",
                                               "--json", "-q"}));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(count_source(rows(again.out), "compiled"), 0u) << again.out;
}

TEST(WarmCliTest, KilledInTheMiddleItLosesNothingAndResumesWithWhatIsMissing) {
  constexpr int n = 40;
  TempDir specs, cache, logs;
  testing::write_variant_specs(specs.path(), n);
  {
    // Without a terminal, progress is a line per finished pair: kill once three are done.
    testing::ChildProcess warm(kiln(cache.path(), {"warm", "--spec-dir", specs.path(), "-j", "1"}), {}, logs / "out",
                               logs / "err");
    ASSERT_TRUE(wait_for_text(logs / "err", "[3/40]")) << testing::read_text(logs / "err");
    warm.kill(SIGKILL);
    ASSERT_EQ(warm.wait(), 128 + SIGKILL) << "the warm finished before it could be killed: make it longer";
  }
  // What it stored is whole; running it again builds only the rest.
  auto verify = run_process(kiln(cache.path(), {"cache", "verify"}));
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  auto resumed = run_process(kiln(cache.path(), {"warm", "--spec-dir", specs.path(), "--json", "-q"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto report = rows(resumed.out);
  ASSERT_EQ(report.size(), static_cast<size_t>(n));
  size_t hits = report.size() - count_source(report, "compiled");
  EXPECT_GE(hits, 3u) << "the three finished before the kill must not be compiled again\n" << resumed.out;
  EXPECT_LT(hits, static_cast<size_t>(n)) << resumed.out;
}

// Interrupts a warm with `sig` once two pairs are done: it finishes what is under way, reports
// exactly the finished pairs, exits 128 + sig, and a rerun compiles only the rest.
void interrupt_and_resume(int sig) {
  constexpr int n = 40;
  TempDir specs, cache, logs;
  testing::write_variant_specs(specs.path(), n);
  testing::ChildProcess warm(kiln(cache.path(), {"warm", "--spec-dir", specs.path(), "-j", "1", "--json"}), {}, logs / "out",
                             logs / "err");
  ASSERT_TRUE(wait_for_text(logs / "err", "[2/40]")) << testing::read_text(logs / "err");
  warm.kill(sig);
  EXPECT_EQ(warm.wait(), 128 + sig);
  std::string err = testing::read_text(logs / "err");
  EXPECT_NE(err.find("kiln: interrupted"), std::string::npos) << err;
  // The report holds exactly the finished pairs, each compiled and stored.
  auto first = rows(testing::read_text(logs / "out"));
  EXPECT_GE(first.size(), 2u);
  EXPECT_LT(first.size(), static_cast<size_t>(n));
  auto resumed = run_process(kiln(cache.path(), {"warm", "--spec-dir", specs.path(), "--json", "-q"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto report = rows(resumed.out);
  EXPECT_EQ(count_source(report, "compiled"), n - first.size()) << resumed.out;
  for (auto& [key, row] : first) EXPECT_NE(report[key].source, "compiled") << key << " was compiled twice";
}

TEST(WarmCliTest, CtrlCFinishesWhatIsUnderWayReportsItAndExits130) { interrupt_and_resume(SIGINT); }

TEST(WarmCliTest, SigtermFinishesWhatIsUnderWayReportsItAndExits143) { interrupt_and_resume(SIGTERM); }

}  // namespace
}  // namespace kiln
