#include "support/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace kiln {
namespace detail {
std::atomic<int> g_log_level{-1};

int read_log_level() {
  const char* env = std::getenv("KILN_LOG");
  std::string_view v = env ? env : "";
  int level = v == "debug" ? 3 : v == "info" ? 2 : v == "warn" ? 1 : 0;
  int expected = -1;
  g_log_level.compare_exchange_strong(expected, level);  // set_log_level may have won
  return g_log_level.load();
}
}  // namespace detail

namespace {

std::chrono::steady_clock::time_point clock_start() {
  static const auto start = std::chrono::steady_clock::now();
  return start;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    default: return "";
  }
}

// stderr, or the KILN_LOG_FILE opened once for appending.
int log_fd() {
  static const int fd = [] {
    const char* path = std::getenv("KILN_LOG_FILE");
    if (!path || !*path) return 2;
    int f = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    return f >= 0 ? f : 2;
  }();
  return fd;
}

}  // namespace

void set_log_level(LogLevel level) { detail::g_log_level.store(static_cast<int>(level)); }

double log_clock_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - clock_start()).count();
}

void log_line(LogLevel level, std::string_view topic, std::string_view message) {
  char head[96];
  int n = std::snprintf(head, sizeof head, "kiln[%d] +%.3f ms %s %.*s: ", static_cast<int>(::getpid()), log_clock_ms(),
                        level_name(level), static_cast<int>(topic.size()), topic.data());
  std::string line(head, n > 0 ? static_cast<size_t>(n) : 0);
  line.append(message);
  line.push_back('\n');
  // One write per line: with O_APPEND (or a pipe), lines of several threads and processes
  // never interleave.
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  size_t done = 0;
  while (done < line.size()) {
    ssize_t w = ::write(log_fd(), line.data() + done, line.size() - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
}

}  // namespace kiln
