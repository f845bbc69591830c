#include "support/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln {

Result<uint64_t> parse_size(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v < 0)
    return invalid_argument("size '" + s + "' is not a number with an optional unit (e.g. 5G, 512M)");
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else return invalid_argument("size '" + s + "' has an unknown unit '" + unit + "' (use B, K, M, G or T)");
  double bytes = v * mult;
  if (bytes > 1.8e19) return invalid_argument("size '" + s + "' is too large");
  return static_cast<uint64_t>(bytes);
}

std::string human_size(uint64_t bytes) {
  static const char* k_units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, k_units[u]);
  return buf;
}

}  // namespace kiln
