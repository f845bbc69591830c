// Runs a helper program with bytes on its stdin and collects its stdout and stderr: how kiln
// keeps a toolchain that can crash (hiprtc) or that keeps state across compiles (LLVM 22's SPIR-V
// back end) out of its own process. No shell is involved; the environment is inherited.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln {

struct SubprocessResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it (SIGABRT, SIGSEGV, ...)
  std::string out;     // all of its stdout
  std::string err;     // its stderr, trimmed and cut to 4 KiB
  // "exited with status 3" / "was killed by Aborted", for messages.
  std::string how_it_ended() const;
};

// Starts `argv[0]` (a path) with `argv`, writes `input` to its stdin (then closes it) while
// reading its stdout to the end, and waits for it. kUnavailable when it cannot be started; an
// exit or a signal of the helper is in the result, not an error.
Result<SubprocessResult> run_subprocess(const std::vector<std::string>& argv, std::string_view input);

}  // namespace kiln
