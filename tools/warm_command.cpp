// `kiln warm`: compile every spec of some folders for a matrix of targets ahead of time (an
// image build, a job's prologue), so that later runs only hit. Each artifact is stored the
// moment it is made, so an interrupted warm (Ctrl-C, SIGTERM, SIGKILL, a lost node) loses
// nothing finished, and running it again compiles only what is missing.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

#include "builders/ops.h"
#include "builders/self_check.h"
#include "tools/cli_common.h"

namespace kiln::tools {
namespace {

using builders::CacheOutcome;

constexpr const char* k_warm_help = R"(usage: kiln warm [--target T]... [--spec-dir DIR]... [-j N] [--check] [--json] [-q]

Builds every spec in the spec folders for every target, so that later runs only hit the cache,
and prints a table: op, target, cache (hit/miss), compile ms, check. A pair the op cannot be
built for (a CUDA target for an op with no CUDA version, an sm below its min_sm) is listed with
the reason and skipped; a compile error is listed with its diagnostics and the rest go on.

Every artifact is stored as soon as it is made: interrupting a warm (Ctrl-C, SIGTERM, or a kill)
loses nothing finished, and running it again compiles only what is missing. The first Ctrl-C
lets the compiles under way finish and stops; a second one stops at once.

options:
  --target T       a target to build for (repeatable: --target cpu --target cuda:sm_80,sm_90;
                   default: the accelerator's native target)
  --spec-dir DIR   a folder of specs (repeatable; default $KILN_SPEC_PATH or the bundled specs)
  -j, --jobs N     build N (spec, target) pairs at once (default: one per core)
  --check          also load each op and run its self-check (targets this machine runs)
  --json           print a JSON array instead of a table (one object per pair, with its status)
  -q, --quiet      no progress on stderr (else a bar on a terminal, a line per pair otherwise)
  --triton         compile again the Triton kernels that runs recorded, for --target cuda:sm_XX,
                   with no GPU: run through the Python that has Triton (`python -m kiln warm
                   --triton --help`)

Exit status: 0 when every pair that can be built is now cached (and, with --check, passed),
1 when one failed, 2 for bad usage, 130 or 143 when interrupted.
)";

struct WarmRow {
  std::string op, target, cache = "-", source = "-", compile_ms = "-", check = "-";
  std::string status = "ok";  // ok, incompatible, failed
  std::string reason;         // why incompatible or failed (one line)
  std::string messages;       // for stderr, printed in table order once every row is done
};

// One (spec, target) pair: the spec file, its parse, the target as given and parsed.
struct WarmItem {
  const std::string* file;
  const Result<builders::OpSpec>* spec;
  const std::string* target_text;
  const builders::Target* target;
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

WarmRow warm_one(builders::Ops& ops, const WarmItem& item, bool check) {
  WarmRow row;
  row.op = *item.file;
  row.target = *item.target_text;
  const auto& spec = *item.spec;
  const builders::Target& target = *item.target;
  auto fail_row = [&](const std::string& word, const std::string& message) {
    row.check = word;
    row.status = "failed";
    row.reason = first_line(message);
    row.messages += message;
    return row;
  };
  if (!spec.ok()) return fail_row("BAD SPEC", "kiln: error: " + spec.status().message() + "\n");
  row.op = spec->name;
  row.target = target.str();
  if (Status compatible = builders::is_compatible(*spec, target); !compatible.ok()) {
    row.status = "incompatible";
    row.check = "incompatible";
    row.reason = compatible.message();
    return row;
  }
  auto outcome = ops.build(*spec, target);
  if (!outcome.ok()) return fail_row("ERROR", "kiln: error: " + spec->name + ": " + outcome.status().message() + "\n");
  for (auto& w : outcome->warnings) row.messages += "kiln: warning: " + w + "\n";
  row.cache = cache_word(*outcome);
  row.source = builders::cache_outcome_name(outcome->cache);
  row.compile_ms = outcome->cache == CacheOutcome::kCompiled ? fixed(outcome->compile_ms) : "0.0";
  if (!outcome->success) return fail_row("COMPILE ERROR", outcome->diagnostics_text());
  if (!check) return row;
  if (!spec->check) {
    row.check = "no check";
    return row;
  }
  if (auto acc = ops.accelerator_for(target);
      !acc.ok() || !(*acc)->can_load(builders::artifact_kind_for(target), builders::effective_target(spec->flags, target).str()).ok()) {
    row.check = "not runnable here";
    return row;
  }
  // The artifact is in the cache now: get() loads it from there.
  auto op = ops.get(spec->name, target.str());
  auto report = op.ok() ? builders::run_self_check(ops, **op) : Result<builders::CheckReport>(op.status());
  if (!report.ok()) return fail_row("ERROR", "kiln: error: " + spec->name + ": " + report.status().message() + "\n");
  if (!report->passed) return fail_row("FAILED", "kiln: " + spec->name + ": " + report->message + "\n");
  row.check = "ok";
  return row;
}

// The signal that interrupted the warm (0: none). The first SIGINT or SIGTERM asks the workers
// to stop after what they are compiling; a second ends the process at once.
std::atomic<int> g_interrupted{0};

extern "C" void on_interrupt(int sig) {
  if (g_interrupted.exchange(sig) != 0) ::_exit(128 + sig);
  const char message[] = "\nkiln: stopping after the compiles under way (again to stop now)\n";
  (void)!::write(2, message, sizeof message - 1);
}

class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = 0;
    struct sigaction sa{};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &m_old_int);
    ::sigaction(SIGTERM, &sa, &m_old_term);
  }
  ~InterruptGuard() {
    ::sigaction(SIGINT, &m_old_int, nullptr);
    ::sigaction(SIGTERM, &m_old_term, nullptr);
  }

 private:
  struct sigaction m_old_int{}, m_old_term{};
};

// Progress on stderr: a bar redrawn in place on a terminal (done/total, the op being built,
// elapsed, rate), a line per finished pair otherwise.
class Progress {
 public:
  Progress(size_t total, bool quiet) : m_total(total), m_quiet(quiet), m_tty(::isatty(2)), m_start(std::chrono::steady_clock::now()) {
    if (m_tty && !m_quiet) m_ticker = std::thread([this] { tick(); });
  }
  ~Progress() { finish(); }

  void started(const std::string& what) {
    std::lock_guard lock(m_mutex);
    m_current = what;
  }
  void finished(const WarmRow& row) {
    std::lock_guard lock(m_mutex);
    ++m_done;
    if (m_quiet) return;
    if (m_tty) {
      draw_locked();
    } else {
      std::fprintf(stderr, "[%zu/%zu] %s for %s: %s\n", m_done, m_total, row.op.c_str(), row.target.c_str(),
                   row.status != "ok" ? row.status.c_str() : row.source == "compiled" ? "compiled" : ("hit (" + row.source + ")").c_str());
    }
  }
  void finish() {
    {
      std::lock_guard lock(m_mutex);
      if (m_finished) return;
      m_finished = true;
    }
    m_wake.notify_all();
    if (m_ticker.joinable()) m_ticker.join();
    if (m_tty && !m_quiet) std::fputs("\r\x1b[2K", stderr);
  }
  double elapsed_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count(); }

 private:
  void tick() {
    std::unique_lock lock(m_mutex);
    while (!m_wake.wait_for(lock, std::chrono::milliseconds(200), [&] { return m_finished; })) draw_locked();
  }
  void draw_locked() {
    constexpr int width = 24;
    int filled = m_total ? static_cast<int>(width * m_done / m_total) : width;
    double s = elapsed_s();
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r\x1b[2K[%s] %zu/%zu  %s  %.1f s  %.1f/s", bar.c_str(), m_done, m_total, m_current.c_str(), s,
                 s > 0 ? static_cast<double>(m_done) / s : 0.0);
    std::fflush(stderr);
  }

  size_t m_total, m_done = 0;
  bool m_quiet, m_tty, m_finished = false;
  std::chrono::steady_clock::time_point m_start;
  std::string m_current;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::thread m_ticker;
};

}  // namespace

int cmd_warm(const std::vector<std::string>& argv, const GlobalOptions& global) {
  if (std::find(argv.begin(), argv.end(), "--triton") != argv.end())
    return usage_error("warm --triton compiles Triton's kernels in the Python that has Triton: run `python -m kiln warm --triton ...` "
                       "with that Python (pip's `kiln` script does the same)", k_warm_help);
  auto args = parse_args(argv, {"--target", "--spec-dir", "-j", "--jobs"}, {"--check", "--json", "--help", "-h", "-q", "--quiet"});
  if (!args.ok()) return usage_error(args.status().message(), k_warm_help);
  if (args->has("--help") || args->has("-h")) return std::cout << k_warm_help, 0;
  if (!args->positional.empty()) return usage_error("warm takes no positional arguments", k_warm_help);
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  if (auto j = args->value("-j", args->value("--jobs")); !j.empty()) {
    char* end = nullptr;
    long n = std::strtol(j.c_str(), &end, 10);
    if (!end || *end || n < 1 || n > 256) return usage_error("-j needs a number of jobs from 1 to 256, not '" + j + "'", k_warm_help);
    jobs = static_cast<unsigned>(n);
  }
  auto ops_result = make_ops(*args, global);
  if (!ops_result.ok()) return fail(ops_result.status());
  builders::Ops& ops = **ops_result;
  std::vector<std::string> targets = args->all("--target");
  if (targets.empty()) targets.push_back(ops.accelerator().native_target());
  std::vector<builders::Target> parsed_targets;
  for (auto& t : targets) {
    auto parsed = builders::parse_target(t);
    if (!parsed.ok()) return usage_error(parsed.status().message(), k_warm_help);
    parsed_targets.push_back(*parsed);
  }
  std::vector<std::string> files = ops.spec_files();
  if (files.empty()) return fail(not_found("no specs (*.toml) in the spec folders"));
  std::vector<Result<builders::OpSpec>> specs;
  for (auto& file : files) specs.push_back(builders::parse_spec_file(file));

  // Every (spec, target) is independent: `jobs` threads take them in order, as ninja -jN
  // would run compilers, but in one process that loads each compiler once.
  std::vector<WarmItem> work;
  for (size_t f = 0; f < files.size(); ++f)
    for (size_t t = 0; t < targets.size(); ++t) work.push_back({&files[f], &specs[f], &targets[t], &parsed_targets[t]});
  std::vector<WarmRow> rows(work.size());
  std::vector<char> done(work.size(), 0);  // not vector<bool>: workers set theirs at once
  std::atomic<size_t> next{0};
  InterruptGuard interrupts;
  Progress progress(work.size(), args->has("-q") || args->has("--quiet"));
  auto worker = [&] {
    for (size_t i; !g_interrupted.load() && (i = next.fetch_add(1)) < work.size();) {
      const std::string& file = *work[i].file;
      progress.started(file.substr(file.find_last_of('/') + 1) + " for " + *work[i].target_text);
      rows[i] = warm_one(ops, work[i], args->has("--check"));
      done[i] = 1;
      progress.finished(rows[i]);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < std::min<size_t>(jobs, work.size()); ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  progress.finish();

  size_t failed = 0, incompatible = 0, compiled = 0, cached = 0, finished = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!done[i]) continue;
    ++finished;
    std::cerr << rows[i].messages;
    failed += rows[i].status == "failed";
    incompatible += rows[i].status == "incompatible";
    // A compile that failed counts as failed, not compiled.
    compiled += rows[i].status == "ok" && rows[i].source == "compiled";
    cached += rows[i].status == "ok" && rows[i].source != "compiled";
  }
  if (args->has("--json")) {
    std::cout << "[";
    bool first = true;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!done[i]) continue;
      auto& r = rows[i];
      std::cout << (first ? "" : ",\n ") << "{\"op\":" << json_string(r.op) << ",\"target\":" << json_string(r.target)
                << ",\"cache\":" << json_string(r.cache) << ",\"source\":" << json_string(r.source)
                << ",\"compile_ms\":" << (r.compile_ms == "-" ? "null" : r.compile_ms) << ",\"check\":" << json_string(r.check)
                << ",\"status\":" << json_string(r.status);
      if (!r.reason.empty()) std::cout << ",\"reason\":" << json_string(r.reason);
      std::cout << "}";
      first = false;
    }
    std::cout << "]\n";
  } else {
    std::printf("%-16s %-16s %-12s %11s  %s\n", "op", "target", "cache", "compile ms", "check");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!done[i]) continue;
      auto& r = rows[i];
      std::string check = r.status == "incompatible" ? "incompatible: " + r.reason : r.check;
      std::printf("%-16s %-16s %-12s %11s  %s\n", r.op.c_str(), r.target.c_str(),
                  (r.source == "remote" ? "hit (remote)" : r.cache).c_str(), r.compile_ms.c_str(), check.c_str());
    }
  }
  std::fflush(stdout);
  std::cerr << "kiln: warm: " << finished << " of " << work.size() << " pairs in " << fixed(progress.elapsed_s(), 1) << " s: "
            << compiled << " compiled, " << cached << " already cached, " << incompatible
            << " incompatible, " << failed << " failed\n";
  if (int sig = g_interrupted.load()) {
    std::cerr << "kiln: interrupted: what was finished is stored; run kiln warm again to build the other " << work.size() - finished
              << "\n";
    return 128 + sig;
  }
  return failed ? 1 : 0;
}

}  // namespace kiln::tools
