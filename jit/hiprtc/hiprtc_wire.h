// What kiln's hiprtc toolchain sends to its helper process (kiln-hiprtc) and what comes back.
// hiprtc runs in a child process because a hiprtc can take the whole process down: Debian's
// (built on LLVM 15) aborts for an architecture it does not know (gfx942). A crash there is a
// failed compile here, never a dead kiln.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/status.h"

namespace kiln::jit {

struct HiprtcRequest {
  std::string library;  // the HIP library holding hiprtc (libamdhip64.so.5, libhiprtc.so.6)
  std::string arch;     // "gfx90a"
  std::vector<std::string> options;
  std::string source_name, source;
  std::vector<std::pair<std::string, std::string>> headers;  // include name -> text
  std::vector<std::string> name_expressions;
};

struct HiprtcReply {
  bool success = false;
  std::string error;  // why it failed before or around the compile (no such library, a call failing)
  std::string log;    // hiprtc's program log
  std::string code;   // the code object
  std::vector<std::pair<std::string, std::string>> lowered_names;
  std::string version;  // "hiprtc 9.0"
};

std::string encode_hiprtc_request(const HiprtcRequest& r);
Result<HiprtcRequest> decode_hiprtc_request(std::string_view bytes);
std::string encode_hiprtc_reply(const HiprtcReply& r);
Result<HiprtcReply> decode_hiprtc_reply(std::string_view bytes);

}  // namespace kiln::jit
