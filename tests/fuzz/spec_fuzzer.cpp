// Any bytes as a spec: a clear error or a spec, never a crash, a hang or a leak.
#include <cstddef>
#include <cstdint>
#include <string>

#include "builders/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  // Relative paths resolve against /nonexistent: source checks fail cleanly too.
  auto spec = kiln::builders::parse_spec_text(text, "/nonexistent/fuzz.toml");
  if (!spec.ok() && spec.status().message().rfind("/nonexistent/fuzz.toml", 0) != 0) __builtin_trap();  // no position
  return 0;
}
