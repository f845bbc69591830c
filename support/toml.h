// toml++ as kiln includes it, in every file that parses TOML (specs, the config file).
#pragma once

// toml++ 3.3 turns its internal assertions into __builtin_assume under NDEBUG with clang;
// an invalid key in a table header ("[[#") then dereferences garbage (found by
// tests/fuzz/spec_fuzzer). Keep its assertions as plain no-ops instead, so the parser's
// own error path runs whichever compiler builds kiln.
#ifdef NDEBUG
#undef NDEBUG
#define KILN_RESTORE_NDEBUG
#endif
#define TOML_ASSERT(expr) static_cast<void>(0)
#define TOML_HEADER_ONLY 1
// Numbers through std::from_chars, not a std::istringstream: the first float a spec holds
// (its tolerances) otherwise initialises the iostream locale, 40,000 instructions of the first
// parse in a process, which is on the path of a whole-process cache hit.
#define TOML_FLOAT_CHARCONV 1
#define TOML_INT_CHARCONV 1
#include <toml++/toml.h>
#ifdef KILN_RESTORE_NDEBUG
#define NDEBUG
#undef KILN_RESTORE_NDEBUG
#endif

#include <string>

#include "support/status.h"

namespace kiln {

// Parses TOML text from `path`, refusing first what toml++ 3.3 (Debian 12) mishandles, found by
// tests/fuzz/spec_fuzzer: a NUL inside a table header dereferences null, and many non-ASCII
// characters (U+00A1..U+0499 among them) reach __builtin_unreachable() in its whitespace
// tables, from more places than a pre-scan can model. So kiln's TOML is ASCII: anything else
// is refused with its position before the parser sees it (strings can still hold any character
// through \uXXXX escapes). Errors read "path:line:col: invalid TOML: ..."; `what` names the
// file in them ("a spec", "a config file").
Result<toml::table> parse_toml(const std::string& text, const std::string& path, const char* what);

}  // namespace kiln
