// kiln cc's parsers on any bytes: a depfile (what a compiler wrote, read on every miss) and a
// command line (one argument per line, as gcc and as nvcc). Never a crash; a depfile that reads
// renders back to the same rules; a command line is cacheable or says why not.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "launcher/compile_command.h"
#include "launcher/depfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto rules = kiln::launcher::parse_depfile(text); rules.ok()) {
    // A name with a ':' or a control character, or one ending in a backslash, is not written
    // back the same (no compiler writes one; kiln keeps no compile whose depfile has one).
    bool plain = true;
    for (auto& r : *rules)
      for (auto* names : {&r.targets, &r.prerequisites})
        for (auto& n : *names)
          if (n.find_first_of(":\r\t\n") != std::string::npos || n.back() == '\\') plain = false;
    if (plain) {
      auto again = kiln::launcher::parse_depfile(kiln::launcher::render_depfile(*rules));
      if (!again.ok() || again->size() != rules->size()) __builtin_trap();
      for (size_t i = 0; i < rules->size(); ++i)
        if ((*again)[i].targets != (*rules)[i].targets || (*again)[i].prerequisites != (*rules)[i].prerequisites) __builtin_trap();
    }
  }
  std::vector<std::string> args;
  for (size_t at = 0; at <= text.size();) {
    size_t nl = std::min(text.find('\n', at), text.size());
    args.emplace_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  kiln::launcher::PathLabels paths("/work/build", {"/work"});
  for (auto family : {kiln::launcher::CompilerFamily::kGcc, kiln::launcher::CompilerFamily::kNvcc}) {
    auto parsed = kiln::launcher::parse_compile_command(family, args, paths);
    if (auto* cmd = std::get_if<kiln::launcher::CompileCommand>(&parsed)) {
      if (cmd->source.empty() || cmd->output.empty() || cmd->mode.empty()) __builtin_trap();
      auto run = cmd->compile_args("/tmp/dep");
      if (run.size() != cmd->args.size() - cmd->dep_option_at.size() + 3) __builtin_trap();
    } else if (std::get<kiln::launcher::NotCacheable>(parsed).reason.empty()) {
      __builtin_trap();
    }
  }
  return 0;
}
