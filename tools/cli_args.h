// A small command-line parser for the kiln tool: options with values, repeated options,
// flags and positional arguments, with messages that say what is wrong.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/status.h"

namespace kiln::tools {

struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values;  // "--target" -> ["cpu", ...]
  std::set<std::string> flags;                             // "--json"

  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  // The last value given for an option, or `fallback`.
  std::string value(const std::string& option, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& option) const;
};

// `with_value` lists options that take a value ("--target T" or "--target=T").
Result<ParsedArgs> parse_args(const std::vector<std::string>& args, const std::set<std::string>& with_value,
                              const std::set<std::string>& flags);

}  // namespace kiln::tools
