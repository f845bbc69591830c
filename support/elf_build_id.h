// The GNU build id of an ELF file, read from its program headers without loading it: how
// kiln fingerprints the libraries that compile (libLLVM, libnvrtc, ...) on the hit path.
#pragma once

#include <string>

#include "support/status.h"

namespace kiln {

// Hex digits; kNotFound when the file has none, kInvalidArgument when it is not 64-bit ELF.
Result<std::string> elf_build_id(const std::string& path);

// The same through the file memo (support/file_memo.h): a stat instead of reading the file,
// in any process, while the file's stamp holds.
Result<std::string> memo_elf_build_id(const std::string& path);

}  // namespace kiln
