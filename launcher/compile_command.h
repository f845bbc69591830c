// What one compiler command line asks for, as `kiln cc` sees it: whether it is a compile of one
// source to one output that kiln can key and replay (nvcc -c/-cubin/-ptx/-fatbin/-dc, a C or
// C++ compiler's -c), and if so its source, output, depfile and the arguments that enter the key,
// with their paths as labels that do not depend on where a workspace lies (paths.h).
//
// Anything else (a link, -E, several sources, `-` as input, a response file, an option that
// writes files kiln would not replay or reads files it would not see, an option it does not know)
// is not cacheable: the compiler then runs untouched, and the reason is counted.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launcher/paths.h"

namespace kiln::launcher {

enum class CompilerFamily { kGcc, kClang, kNvcc };
const char* family_name(CompilerFamily f);  // "gcc", "clang", "nvcc"

// The family of a compiler by its file name (g++, gcc-12, cc, c++, clang++-22, nvcc); nullopt
// for one kiln cannot key (then every command runs untouched).
std::optional<CompilerFamily> family_of(const std::string& compiler_path);

struct CompileCommand {
  CompilerFamily family = CompilerFamily::kGcc;
  std::string source;   // as given
  std::string output;   // as given (or the compiler's default name for it)
  std::string mode;     // what it makes: "object", "rdc-object", "cubin", "ptx", "fatbin"
  // The depfile the caller asked for (-MF / --dependency-output), "" for none.
  std::string depfile;
  bool debug_info = false;  // -g (not -g0), nvcc -G or -lineinfo: paths of this folder end up in the output
  // The arguments as they enter the key: in order, the output, depfile and any of their names
  // left out, and every path as a label.
  std::vector<std::string> key_args;
  // The folders its include options name (absolute): where its headers may come from.
  std::vector<std::string> include_dirs;
  // nvcc's host compiler, as -ccbin/--compiler-bindir names it ("" when not named).
  std::string host_compiler;
  // The arguments to run it with on a miss: the caller's, the depfile written to `dep_out` with
  // every header (-MD rather than -MMD), so the manifest misses no system header.
  std::vector<std::string> compile_args(const std::string& dep_out) const;

  std::vector<std::string> args;  // the caller's arguments, untouched
  std::vector<size_t> dep_option_at;  // where the caller's depfile options are in `args` (replaced on a miss)
};

struct NotCacheable {
  std::string reason;  // short, stable, for the counters: "link", "-E", "unknown option -foo"
};

// `args` are the compiler's arguments (argv after the compiler). `paths` labels them.
std::variant<CompileCommand, NotCacheable> parse_compile_command(CompilerFamily family, const std::vector<std::string>& args,
                                                                 const PathLabels& paths);

}  // namespace kiln::launcher
