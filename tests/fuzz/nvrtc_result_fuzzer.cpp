// What libkiln_nvrtc.so reads back from the store (a tier's bytes may be hostile): the manifest's
// list of paths and a compile's stored answers. Any bytes decode or are refused, never read past
// their end; what decodes re-encodes to something that decodes to the same.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "nvrtc_preload/program_key.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::nvrtc_preload;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto paths = decode_paths(text)) {
    auto again = decode_paths(encode_paths(*paths));
    if (!again || *again != *paths) __builtin_trap();
  }
  if (auto lists = decode_manifests(text)) {
    auto again = decode_manifests(encode_manifests(*lists));
    if (!again || *again != *lists) __builtin_trap();
  }
  // The input split at 0xff bytes into a group's files: status, names, then ptx and cubin.
  std::map<std::string, std::string> files;
  const char* names[] = {"status", "names", "ptx", "cubin"};
  size_t at = 0;
  for (const char* name : names) {
    size_t end = text.find('\xff', at);
    files[name] = std::string(text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  if (auto result = decode_result(files)) {
    auto encoded = encode_result(*result);
    auto again = decode_result(std::map<std::string, std::string>(encoded.begin(), encoded.end()));
    if (!again || again->outputs != result->outputs || again->lowered_names != result->lowered_names ||
        again->compile_code != result->compile_code)
      __builtin_trap();
  }
  return 0;
}
