// kiln's debug log, as ccache has one: what each lookup did (input key, manifest found or not,
// the header whose hash differed, index hit or miss, blob verified, loaded), what each compile
// ran and how long each step took.
//
//   KILN_LOG=warn|info|debug   (or `kiln --verbose`, which is debug)
//   KILN_LOG_FILE=PATH         append there instead of stderr
//
// Each line: "kiln[pid] +12.345 ms debug lookup: ...", the time since the log was first used.
// Off by default, and free when off: KILN_LOG_ENABLED is one load and compare of a global, and
// the message is not built.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

namespace kiln {

enum class LogLevel : int { kOff = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

namespace detail {
// -1 until KILN_LOG has been read.
extern std::atomic<int> g_log_level;
int read_log_level();
}  // namespace detail

inline bool log_enabled(LogLevel level) {
  int current = detail::g_log_level.load(std::memory_order_relaxed);
  if (current < 0) current = detail::read_log_level();
  return current >= static_cast<int>(level);
}

// Overrides KILN_LOG (kiln --verbose).
void set_log_level(LogLevel level);
// Writes one line (a newline is added). Thread-safe; lines never interleave.
void log_line(LogLevel level, std::string_view topic, std::string_view message);
// Milliseconds since the log's clock started, for messages that report a step's length.
double log_clock_ms();

}  // namespace kiln

// KILN_LOG_AT(kDebug, "lookup", "input key " + key.hex()): the message is built only when on.
#define KILN_LOG_AT(level, topic, message)                                       \
  do {                                                                           \
    if (::kiln::log_enabled(::kiln::LogLevel::level)) ::kiln::log_line(::kiln::LogLevel::level, topic, message); \
  } while (0)
