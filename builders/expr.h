// Integer expressions in check sections: "n", "rows*cols", "cdiv(n, block)", "max(n/4, 1)".
// Grammar: expr := term (('+'|'-') term)*; term := factor (('*'|'/'|'%') factor)*;
// factor := integer | name | name '(' expr (',' expr)* ')' | '(' expr ')' | '-' factor.
// Functions: cdiv(a,b) (ceiling division), min, max. Division by zero is an error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::builders {

// Errors say which column of the expression is wrong: "col 5: unknown name 'm'".
Result<int64_t> eval_expr(std::string_view text, const std::map<std::string, int64_t>& names);

}  // namespace kiln::builders
