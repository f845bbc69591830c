// Target strings (`--target`, doctor, Ops::get): a Target or an error, never a crash; and a
// parsed target prints as a string that parses back to itself (targets enter keys as text).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "builders/target.h"
#include "support/cuda_toolkit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = kiln::builders::parse_target(text);
  if (!t.ok()) return 0;
  auto again = kiln::builders::parse_target(t->str());
  if (!again.ok() || !(*again == *t)) std::abort();
  if (t->backend == "cuda" && kiln::cuda_archs_in(t->str()).empty()) std::abort();
  if (t->backend == "hip" && t->arch.rfind("gfx", 0) != 0) std::abort();
  return 0;
}
