// Check-section expressions: a value or an error, never a crash, overflow trap or deep recursion.
#include <cstddef>
#include <cstdint>
#include <string>

#include "builders/expr.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::map<std::string, int64_t> names = {{"n", 1000003}, {"block", 256}, {"rows", 7}, {"cols", 0}};
  (void)kiln::builders::eval_expr(std::string_view(reinterpret_cast<const char*>(data), size), names);
  return 0;
}
