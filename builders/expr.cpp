#include "builders/expr.h"

#include <cctype>
#include <limits>
#include <vector>

namespace kiln::builders {
namespace {

class Parser {
 public:
  Parser(std::string_view text, const std::map<std::string, int64_t>& names) : m_text(text), m_names(names) {}

  Result<int64_t> parse() {
    auto v = expr();
    if (!v.ok()) return v;
    skip_space();
    if (m_pos != m_text.size()) return error("unexpected '" + std::string(1, m_text[m_pos]) + "'");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("col " + std::to_string(m_pos + 1) + " of '" + std::string(m_text) + "': " + what);
  }
  void skip_space() {
    while (m_pos < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_pos]))) ++m_pos;
  }
  bool eat(char c) {
    skip_space();
    if (m_pos < m_text.size() && m_text[m_pos] == c) {
      ++m_pos;
      return true;
    }
    return false;
  }

  // Bounds recursion ("((((..." or "----...") so hostile input cannot exhaust the stack.
  struct DepthGuard {
    int& depth;
    explicit DepthGuard(int& d) : depth(++d) {}
    ~DepthGuard() { --depth; }
  };

  Result<int64_t> expr() {
    DepthGuard guard(m_depth);
    if (m_depth > 64) return error("expression nested too deeply");
    KILN_ASSIGN_OR_RETURN(int64_t v, term());
    for (;;) {
      if (eat('+')) {
        KILN_ASSIGN_OR_RETURN(int64_t r, term());
        if (__builtin_add_overflow(v, r, &v)) return error("overflow");
      } else if (eat('-')) {
        KILN_ASSIGN_OR_RETURN(int64_t r, term());
        if (__builtin_sub_overflow(v, r, &v)) return error("overflow");
      } else {
        return v;
      }
    }
  }

  Result<int64_t> term() {
    KILN_ASSIGN_OR_RETURN(int64_t v, factor());
    for (;;) {
      skip_space();
      if (m_pos >= m_text.size()) return v;
      char op = m_text[m_pos];
      if (op != '*' && op != '/' && op != '%') return v;
      ++m_pos;
      KILN_ASSIGN_OR_RETURN(int64_t r, factor());
      if (op == '*') {
        if (__builtin_mul_overflow(v, r, &v)) return error("overflow");
      } else {
        if (r == 0) return error("division by zero");
        if (v == std::numeric_limits<int64_t>::min() && r == -1) return error("overflow");
        v = op == '/' ? v / r : v % r;
      }
    }
  }

  Result<int64_t> factor() {
    DepthGuard guard(m_depth);
    if (m_depth > 64) return error("expression nested too deeply");
    skip_space();
    if (m_pos >= m_text.size()) return error("expected a number, a name or '('");
    char c = m_text[m_pos];
    if (c == '-') {
      ++m_pos;
      KILN_ASSIGN_OR_RETURN(int64_t v, factor());
      if (v == std::numeric_limits<int64_t>::min()) return error("overflow");
      return -v;
    }
    if (c == '(') {
      ++m_pos;
      KILN_ASSIGN_OR_RETURN(int64_t v, expr());
      if (!eat(')')) return error("expected ')'");
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (m_pos < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_pos]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, m_text[m_pos] - '0', &v))
          return error("number too large");
        ++m_pos;
      }
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = m_pos;
      while (m_pos < m_text.size() && (std::isalnum(static_cast<unsigned char>(m_text[m_pos])) || m_text[m_pos] == '_')) ++m_pos;
      std::string name(m_text.substr(start, m_pos - start));
      if (eat('(')) return call(name, start);
      auto it = m_names.find(name);
      if (it == m_names.end()) {
        m_pos = start;
        return error("unknown name '" + name + "'");
      }
      return it->second;
    }
    return error("unexpected '" + std::string(1, c) + "'");
  }

  Result<int64_t> call(const std::string& name, size_t start) {
    std::vector<int64_t> args;
    if (!eat(')')) {
      for (;;) {
        KILN_ASSIGN_OR_RETURN(int64_t v, expr());
        args.push_back(v);
        if (eat(')')) break;
        if (!eat(',')) return error("expected ',' or ')'");
      }
    }
    auto need = [&](size_t n) -> Status {
      if (args.size() == n) return {};
      size_t here = m_pos;
      m_pos = start;
      Status st = error(name + "() takes " + std::to_string(n) + " arguments");
      m_pos = here;
      return st;
    };
    if (name == "cdiv") {
      KILN_RETURN_IF_ERROR(need(2));
      if (args[1] <= 0) return error("cdiv() needs a positive divisor");
      if (args[0] < 0) return error("cdiv() needs a non-negative dividend");
      return args[0] / args[1] + (args[0] % args[1] != 0);
    }
    if (name == "min" || name == "max") {
      KILN_RETURN_IF_ERROR(need(2));
      return name == "min" ? std::min(args[0], args[1]) : std::max(args[0], args[1]);
    }
    m_pos = start;
    return error("unknown function '" + name + "' (known: cdiv, min, max)");
  }

  std::string_view m_text;
  const std::map<std::string, int64_t>& m_names;
  size_t m_pos = 0;
  int m_depth = 0;
};

}  // namespace

Result<int64_t> eval_expr(std::string_view text, const std::map<std::string, int64_t>& names) {
  return Parser(text, names).parse();
}

}  // namespace kiln::builders
