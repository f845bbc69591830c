// SPIR-V checked by SPIRV-Tools' validator (the library behind spirv-val, linked in, no
// subprocess). Every SPIR-V artifact passes through here before it is stored: one that fails
// is a build error carrying the validator's message.
#pragma once

#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::jit {

// Ok, or kCompileError with what the validator said (its message, and the word index it
// points at). `bytes` must hold whole 32-bit words.
Status validate_spirv(std::string_view bytes);

// "SPIRV-Tools v2023.1 ..." as the library reports itself.
std::string spirv_tools_version();

}  // namespace kiln::jit
