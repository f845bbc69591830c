#include "tools/cli_args.h"

namespace kiln::tools {

std::string ParsedArgs::value(const std::string& option, const std::string& fallback) const {
  auto it = values.find(option);
  return it == values.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> ParsedArgs::all(const std::string& option) const {
  auto it = values.find(option);
  return it == values.end() ? std::vector<std::string>{} : it->second;
}

Result<ParsedArgs> parse_args(const std::vector<std::string>& args, const std::set<std::string>& with_value,
                              const std::set<std::string>& flags) {
  ParsedArgs out;
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positional || a.size() < 2 || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    } else if (a[1] != '-' && a.size() > 2 && with_value.count(a.substr(0, 2))) {
      name = a.substr(0, 2);  // a short option with its value attached: -j4, -ofile
      value = a.substr(2);
      inline_value = true;
    }
    if (with_value.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return invalid_argument("option " + name + " needs a value");
        value = args[++i];
      }
      out.values[name].push_back(value);
    } else if (flags.count(name) && !inline_value) {
      out.flags.insert(name);
    } else {
      return invalid_argument("unknown option " + a + " (see --help)");
    }
  }
  return out;
}

}  // namespace kiln::tools
