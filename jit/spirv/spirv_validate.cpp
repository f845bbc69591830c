#include "jit/spirv/spirv_validate.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include <spirv-tools/libspirv.hpp>

namespace kiln::jit {

Status validate_spirv(std::string_view bytes) {
  if (bytes.empty() || bytes.size() % 4 != 0)
    return Status(StatusCode::kCompileError, "SPIR-V validation: " + std::to_string(bytes.size()) +
                                                 " bytes are not a whole number of 32-bit words");
  std::vector<uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  // The newest universal environment: what spirv-val checks by default. The OpenCL rules that
  // matter (addressing model, capabilities the module declares) are checked under it too.
  spvtools::SpirvTools tools(SPV_ENV_UNIVERSAL_1_6);
  std::string messages;
  tools.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t& position, const char* message) {
    if (!messages.empty()) messages += "; ";
    messages += message;
    messages += " (word " + std::to_string(position.index) + ")";
  });
  if (tools.Validate(words)) return {};
  return Status(StatusCode::kCompileError, "SPIR-V validation failed: " + (messages.empty() ? std::string("no message") : messages));
}

std::string spirv_tools_version() { return spvSoftwareVersionDetailsString(); }

}  // namespace kiln::jit
