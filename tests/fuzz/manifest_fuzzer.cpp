// The header-manifest and kernel-list decoders read what the store hands back: any bytes
// decode or fail with kDataLoss; what decodes re-encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "builders/op_builder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto manifest = kiln::builders::decode_manifest(text);
  if (manifest.ok()) {
    // Hex case may differ; decoding the re-encoding must give the same entries.
    auto again = kiln::builders::decode_manifest(kiln::builders::encode_manifest(manifest.value()));
    if (!again.ok() || again->size() != manifest->size()) __builtin_trap();
  } else if (manifest.status().code() != kiln::StatusCode::kDataLoss) {
    __builtin_trap();
  }
  auto kernels = kiln::builders::decode_kernels(text);
  if (kernels.ok() && kiln::builders::encode_kernels(kernels.value()).size() > text.size() + 1) __builtin_trap();
  return 0;
}
