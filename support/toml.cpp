#include "support/toml.h"

namespace kiln {
namespace {

Status toml_error(const std::string& path, uint32_t line, uint32_t column, const std::string& message) {
  return invalid_argument(path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": invalid TOML: " + message);
}

}  // namespace

Result<toml::table> parse_toml(const std::string& text, const std::string& path, const char* what) {
  uint32_t line = 1, column = 1;
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte == 0 || byte >= 0x80) {
      return toml_error(path, line, column,
                        byte == 0 ? std::string("a NUL byte is not allowed in ") + what
                                  : std::string(what) + " must be ASCII (write other characters in strings as \\uXXXX escapes)");
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return toml_error(path, e.source().begin.line, e.source().begin.column, std::string(e.description()));
  }
}

}  // namespace kiln
