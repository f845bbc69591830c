#include "launcher/compile_command.h"

#include <algorithm>
#include <array>

#include "support/file_util.h"

namespace kiln::launcher {

const char* family_name(CompilerFamily f) {
  switch (f) {
    case CompilerFamily::kGcc: return "gcc";
    case CompilerFamily::kClang: return "clang";
    case CompilerFamily::kNvcc: return "nvcc";
  }
  return "?";
}

std::optional<CompilerFamily> family_of(const std::string& compiler_path) {
  std::string name = compiler_path.substr(compiler_path.rfind('/') + 1);
  // A version suffix ("g++-12", "clang++-22") or a target prefix ("x86_64-linux-gnu-g++-12").
  auto has = [&](std::string_view tool) {
    size_t at = name.find(tool);
    if (at == std::string::npos) return false;
    bool start_ok = at == 0 || name[at - 1] == '-';
    size_t end = at + tool.size();
    bool end_ok = end == name.size() || name[end] == '-';
    return start_ok && end_ok;
  };
  if (has("nvcc")) return CompilerFamily::kNvcc;
  if (has("clang") || has("clang++")) return CompilerFamily::kClang;
  if (has("gcc") || has("g++") || has("cc") || has("c++")) return CompilerFamily::kGcc;
  return std::nullopt;
}

namespace {

bool has_prefix(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool is_source_name(std::string_view path, CompilerFamily family) {
  size_t dot = path.rfind('.');
  if (dot == std::string_view::npos || path.find('/', dot) != std::string_view::npos) return false;
  std::string_view ext = path.substr(dot + 1);
  static constexpr std::array<std::string_view, 9> k_host = {"c", "cc", "cpp", "cxx", "c++", "C", "cp", "CPP", "i"};
  if (std::find(k_host.begin(), k_host.end(), ext) != k_host.end()) return true;
  if (ext == "ii") return true;
  return (family == CompilerFamily::kNvcc || family == CompilerFamily::kClang) && ext == "cu";
}

std::string replace_extension(const std::string& path, const std::string& ext) {
  std::string base = path.substr(path.rfind('/') + 1);
  size_t dot = base.rfind('.');
  return (dot == std::string::npos ? base : base.substr(0, dot)) + ext;
}

// One pass over a command line: the state both families' parsers fill.
struct Parse {
  const PathLabels& paths;
  const std::vector<std::string>& args;
  CompileCommand cmd;
  std::vector<std::string> inputs;
  std::optional<std::string> fail;
  bool asked_depfile = false;

  void refuse(std::string why) {
    if (!fail) fail = std::move(why);
  }
  void key(const std::string& a) { cmd.key_args.push_back(a); }
  // A path by its label, and a relative one by its spelling too: the compiler writes a relative
  // name into the depfile as it was given, and a hit replays that depfile, so `../src/a.c` from
  // one build folder and `../../src/a.c` from a deeper one must not share.
  void key_path(const std::string& option, const std::string& path) {
    std::string spelled = !path.empty() && path[0] == '/' ? std::string() : "\x1f" + path;
    cmd.key_args.push_back(option + "\x1f" + paths.label(path) + spelled);
  }
  // An input, keyed where it stands: -x applies to the inputs after it.
  void input(const std::string& path) {
    inputs.push_back(path);
    key_path("input", path);
  }
  void include_dir(const std::string& option, const std::string& dir) {
    key_path(option, dir);
    cmd.include_dirs.push_back(absolute_path(dir.empty() || dir[0] == '/' ? dir : paths.cwd() + "/" + dir));
  }
};

// ---- C and C++ compilers (GCC's and Clang's drivers share these spellings).

// Options that take the next argument (or a joined one) and name a path.
constexpr std::array<std::string_view, 11> k_gcc_path_options = {"-isystem", "-idirafter", "-iquote",  "-include", "-imacros", "-iprefix",
                                                                "-iwithprefix", "-iwithprefixbefore", "-isysroot", "--sysroot", "-I"};
// Options that take the next argument as a plain value.
constexpr std::array<std::string_view, 6> k_gcc_value_options = {"-D", "-U", "-x", "--param", "-target", "-Xassembler"};
// Option prefixes kiln cannot key or replay: they load code into the compiler, read files no
// depfile names, write files besides the output, or preprocess only.
constexpr auto k_gcc_refused = std::to_array<std::string_view>({
    "-fplugin",      "-specs",         "--specs",       "-B",        "-fprofile-use", "-fprofile-sample-use", "-fauto-profile",
    "-fprofile-arcs", "--coverage",    "-ftest-coverage", "-save-temps", "--save-temps", "-Xclang",           "-Xpreprocessor",
    "-Wp,",          "-fmodules",      "-fdump-",       "-fstack-usage", "-fcallgraph-info", "-gsplit-dwarf", "-MJ",
    "-fcreate-profile", "-fprofile", "-ftime-trace", "-fpass-plugin", "-fbranch-probabilities", "-fmodule-", "-fopt-info",
    "-fsave-optimization-record", "-fdiagnostics-format=sarif", "-fdiagnostics-format=json-file", "-fdiagnostics-add-output"});
// An option whose meaning is this machine's CPU or GPU ("-march=native", nvcc's -arch=native).
bool names_this_host(std::string_view arg) {
  return arg == "native" || (arg.size() >= 7 && arg.substr(arg.size() - 7) == "=native");
}

// Families of options kept in the key as written.
constexpr std::array<std::string_view, 14> k_gcc_flag_prefixes = {"-O", "-g", "-f", "-W", "-m", "-std=", "-pedantic", "-l", "-L",
                                                                  "--param=", "--target=", "-Wa,", "-Wl,", "-nostd"};
constexpr std::array<std::string_view, 13> k_gcc_flags = {"-pthread", "-pipe", "-w", "-ansi", "-shared", "-static", "-rdynamic",
                                                          "-s", "-p", "-pg", "-undef", "-v", "-trigraphs"};

void parse_gcc(Parse& p) {
  auto& a = p.args;
  bool compile = false;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& arg = a[i];
    auto next = [&](const std::string& option) -> std::optional<std::string> {
      if (i + 1 >= a.size()) {
        p.refuse(option + " without its value");
        return std::nullopt;
      }
      return a[++i];
    };
    if (arg.empty()) continue;
    if (arg[0] == '@') return p.refuse("response file");
    if (arg == "-") return p.refuse("source from stdin");
    if (arg[0] != '-') {
      p.input(arg);
      continue;
    }
    if (arg == "-c") {
      compile = true;
      continue;
    }
    if (arg == "-E" || arg == "-S" || arg == "-M" || arg == "-MM" || arg == "-fsyntax-only" || arg == "-###")
      return p.refuse(arg);
    if (arg == "-o" || (has_prefix(arg, "-o") && arg.size() > 2)) {
      auto v = arg == "-o" ? next(arg) : std::optional<std::string>(arg.substr(2));
      if (!v) return;
      p.cmd.output = *v;
      continue;
    }
    if (arg == "-MD" || arg == "-MMD") {
      p.asked_depfile = true;
      p.cmd.dep_option_at.push_back(i);
      continue;
    }
    if (arg == "-MF" || (has_prefix(arg, "-MF") && arg.size() > 3)) {
      p.cmd.dep_option_at.push_back(i);
      auto v = arg == "-MF" ? next(arg) : std::optional<std::string>(arg.substr(3));
      if (!v) return;
      if (arg == "-MF") p.cmd.dep_option_at.push_back(i);
      p.cmd.depfile = *v;
      continue;
    }
    if (arg == "-MT" || arg == "-MQ") {
      auto v = next(arg);
      if (!v) return;
      p.key_path(arg, *v);  // a target name is the output's path, usually
      continue;
    }
    if (arg == "-MP") {
      p.key(arg);
      continue;
    }
    if (std::any_of(k_gcc_refused.begin(), k_gcc_refused.end(), [&](std::string_view r) { return has_prefix(arg, r); }))
      return p.refuse(arg.substr(0, std::min<size_t>(arg.size(), 32)));
    // What this host is (-march=native): a key shared with other machines cannot say it.
    if (names_this_host(arg)) return p.refuse(arg);
    bool matched = false;
    for (std::string_view o : k_gcc_path_options) {
      if (!has_prefix(arg, o)) continue;
      std::string option(o);
      std::string value;
      if (arg.size() == o.size()) {
        auto v = next(arg);
        if (!v) return;
        value = *v;
      } else {
        value = arg.substr(o.size());
        if (value[0] == '=' && o == "--sysroot") value = value.substr(1);
      }
      if (option == "-I" || option == "-isystem" || option == "-idirafter" || option == "-iquote") p.include_dir(option, value);
      else p.key_path(option, value);
      matched = true;
      break;
    }
    if (matched) continue;
    for (std::string_view o : k_gcc_value_options) {
      if (!has_prefix(arg, o)) continue;
      if (arg.size() == o.size()) {
        auto v = next(arg);
        if (!v) return;
        p.key(arg + "\x1f" + *v);
      } else if (o == "-D" || o == "-U" || o == "-x") {
        p.key(arg);
      } else {
        continue;  // "-targetfoo", "--paramfoo": not this option
      }
      matched = true;
      break;
    }
    if (matched) continue;
    if (std::find(k_gcc_flags.begin(), k_gcc_flags.end(), arg) != k_gcc_flags.end() ||
        std::any_of(k_gcc_flag_prefixes.begin(), k_gcc_flag_prefixes.end(), [&](std::string_view f) { return has_prefix(arg, f); })) {
      if (has_prefix(arg, "-g") && arg != "-g0") p.cmd.debug_info = true;
      p.key(arg);
      continue;
    }
    return p.refuse("unknown option " + arg.substr(0, std::min<size_t>(arg.size(), 48)));
  }
  if (!compile) return p.refuse("link (no -c)");
  p.cmd.mode = "object";
}

// ---- nvcc. Options are "-name" or "--long-name", their values separate, after '=', or (for a
// few short ones) joined.

enum class NvKind { kFlag, kValue, kPath, kInclude, kRefuse, kMode, kOutput, kDepGen, kDepFile, kDepTarget, kHostCompiler };
struct NvOption {
  std::string_view short_name, long_name;
  NvKind kind;
  std::string_view mode = {};
};
constexpr NvOption k_nvcc_options[] = {
    {"-c", "--compile", NvKind::kMode, "object"},
    {"-dc", "--device-c", NvKind::kMode, "rdc-object"},
    {"-cubin", "--cubin", NvKind::kMode, "cubin"},
    {"-ptx", "--ptx", NvKind::kMode, "ptx"},
    {"-fatbin", "--fatbin", NvKind::kMode, "fatbin"},
    {"-o", "--output-file", NvKind::kOutput},
    {"-MD", "--generate-dependencies-with-compile", NvKind::kDepGen},
    {"-MMD", "--generate-nonsystem-dependencies-with-compile", NvKind::kDepGen},
    {"-MF", "--dependency-output", NvKind::kDepFile},
    {"-MT", "--dependency-target-name", NvKind::kDepTarget},
    {"-ccbin", "--compiler-bindir", NvKind::kHostCompiler},
    {"-I", "--include-path", NvKind::kInclude},
    {"-isystem", "--system-include", NvKind::kInclude},
    {"-include", "--pre-include", NvKind::kPath},
    {"-D", "--define-macro", NvKind::kValue},
    {"-U", "--undefine-macro", NvKind::kValue},
    {"-x", "--x", NvKind::kValue},
    {"-std", "--std", NvKind::kValue},
    {"-arch", "--gpu-architecture", NvKind::kValue},
    {"-code", "--gpu-code", NvKind::kValue},
    {"-gencode", "--generate-code", NvKind::kValue},
    {"-Xcompiler", "--compiler-options", NvKind::kValue},
    {"-Xptxas", "--ptxas-options", NvKind::kValue},
    {"-Xnvlink", "--nvlink-options", NvKind::kValue},
    {"-Xlinker", "--linker-options", NvKind::kValue},
    {"-Xfatbin", "--fatbin-options", NvKind::kValue},
    {"-Xcudafe", "", NvKind::kValue},
    {"-maxrregcount", "--maxrregcount", NvKind::kValue},
    {"-t", "--threads", NvKind::kValue},
    {"-split-compile", "--split-compile", NvKind::kValue},
    {"-rdc", "--relocatable-device-code", NvKind::kValue},
    {"-ftz", "--ftz", NvKind::kValue},
    {"-prec-div", "--prec-div", NvKind::kValue},
    {"-prec-sqrt", "--prec-sqrt", NvKind::kValue},
    {"-fmad", "--fmad", NvKind::kValue},
    {"-default-stream", "--default-stream", NvKind::kValue},
    {"-Werror", "--Werror", NvKind::kValue},
    {"-diag-suppress", "--diag-suppress", NvKind::kValue},
    {"-diag-error", "--diag-error", NvKind::kValue},
    {"-diag-warn", "--diag-warn", NvKind::kValue},
    {"-m", "--machine", NvKind::kValue},
    {"-O", "--optimize", NvKind::kValue},
    {"-dopt", "--dopt", NvKind::kValue},
    {"-L", "--library-path", NvKind::kValue},
    {"-l", "--library", NvKind::kValue},
    {"-jump-table-density", "--jump-table-density", NvKind::kValue},
    {"-compress-mode", "--compress-mode", NvKind::kValue},
    {"-device-stack-protector", "--device-stack-protector", NvKind::kValue},
    {"-frandom-seed", "--frandom-seed", NvKind::kValue},
    {"-allow-expensive-optimizations", "--allow-expensive-optimizations", NvKind::kValue},
    {"-no-compress", "--no-compress", NvKind::kFlag},
    {"-extra-device-vectorization", "--extra-device-vectorization", NvKind::kFlag},
    {"-err-no", "--display-error-number", NvKind::kFlag},
    {"-no-err-no", "--no-display-error-number", NvKind::kFlag},
    {"-no-host-device-initializer-list", "--no-host-device-initializer-list", NvKind::kFlag},
    {"-no-host-device-move-forward", "--no-host-device-move-forward", NvKind::kFlag},
    {"-ewp", "--extensible-whole-program", NvKind::kFlag},
    {"-Wmissing-launch-bounds", "--Wmissing-launch-bounds", NvKind::kFlag},
    {"-lineinfo", "--generate-line-info", NvKind::kFlag},
    {"-use_fast_math", "--use_fast_math", NvKind::kFlag},
    {"-expt-relaxed-constexpr", "--expt-relaxed-constexpr", NvKind::kFlag},
    {"-expt-extended-lambda", "--expt-extended-lambda", NvKind::kFlag},
    {"-extended-lambda", "--extended-lambda", NvKind::kFlag},
    {"-restrict", "--restrict", NvKind::kFlag},
    {"-w", "--disable-warnings", NvKind::kFlag},
    {"-g", "--debug", NvKind::kFlag},
    {"-G", "--device-debug", NvKind::kFlag},
    {"-res-usage", "--resource-usage", NvKind::kFlag},
    {"-shared", "--shared", NvKind::kFlag},
    {"-allow-unsupported-compiler", "--allow-unsupported-compiler", NvKind::kFlag},
    {"-keep-device-functions", "--keep-device-functions", NvKind::kFlag},
    {"-static-global-template-stub", "--static-global-template-stub", NvKind::kValue},
    {"-Wno-deprecated-gpu-targets", "--Wno-deprecated-gpu-targets", NvKind::kFlag},
    {"-Wno-deprecated-declarations", "--Wno-deprecated-declarations", NvKind::kFlag},
    {"-Wreorder", "--Wreorder", NvKind::kFlag},
    {"-Wdefault-stream-launch", "--Wdefault-stream-launch", NvKind::kFlag},
    {"-Wext-lambda-captures-this", "--Wext-lambda-captures-this", NvKind::kFlag},
    {"-src-in-ptx", "--source-in-ptx", NvKind::kFlag},
    {"-v", "--verbose", NvKind::kFlag},
    {"-pg", "--profile", NvKind::kFlag},
    {"-dlto", "--dlink-time-opt", NvKind::kFlag},
    {"-E", "--preprocess", NvKind::kRefuse},
    {"-M", "--generate-dependencies", NvKind::kRefuse},
    {"-MM", "--generate-nonsystem-dependencies", NvKind::kRefuse},
    {"-cuda", "--cuda", NvKind::kRefuse},
    {"-link", "--link", NvKind::kRefuse},
    {"-lib", "--lib", NvKind::kRefuse},
    {"-dlink", "--device-link", NvKind::kRefuse},
    {"-dw", "--device-w", NvKind::kRefuse},
    {"-run", "--run", NvKind::kRefuse},
    {"-optix-ir", "--optix-ir", NvKind::kRefuse},
    {"-keep", "--keep", NvKind::kRefuse},
    {"-keep-dir", "--keep-dir", NvKind::kRefuse},
    {"-save-temps", "--save-temps", NvKind::kRefuse},
    {"-time", "--time", NvKind::kRefuse},
    {"-fdevice-time-trace", "--fdevice-time-trace", NvKind::kRefuse},
    {"-dryrun", "--dryrun", NvKind::kRefuse},
    {"-odir", "--output-directory", NvKind::kRefuse},
    {"-optf", "--options-file", NvKind::kRefuse},
    {"-forward-unknown-to-host-compiler", "--forward-unknown-to-host-compiler", NvKind::kFlag},
    {"-forward-unknown-to-host-linker", "--forward-unknown-to-host-linker", NvKind::kRefuse},
};

// Short options nvcc also takes with the value joined ("-DNAME", "-I/dir", "-O3").
constexpr std::array<std::string_view, 7> k_nvcc_joinable = {"-D", "-U", "-I", "-L", "-l", "-O", "-t"};

// An option a C or C++ driver takes on its own, with no value after it, that kiln can key.
bool host_flag(const std::string& arg) {
  if (std::any_of(k_gcc_refused.begin(), k_gcc_refused.end(), [&](std::string_view r) { return has_prefix(arg, r); })) return false;
  return std::find(k_gcc_flags.begin(), k_gcc_flags.end(), arg) != k_gcc_flags.end() ||
         std::any_of(k_gcc_flag_prefixes.begin(), k_gcc_flag_prefixes.end(), [&](std::string_view f) { return has_prefix(arg, f); });
}

void parse_nvcc(Parse& p) {
  auto& a = p.args;
  // Wherever it stands, it applies to the whole command line.
  bool forward_unknown = std::any_of(a.begin(), a.end(), [](const std::string& s) {
    return s == "-forward-unknown-to-host-compiler" || s == "--forward-unknown-to-host-compiler";
  });
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& arg = a[i];
    if (arg.empty()) continue;
    if (arg[0] == '@') return p.refuse("response file");
    if (arg == "-") return p.refuse("source from stdin");
    if (arg[0] != '-') {
      p.input(arg);
      continue;
    }
    std::string name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const NvOption* option = nullptr;
    for (auto& o : k_nvcc_options)
      if (name == o.short_name || (!o.long_name.empty() && name == o.long_name)) option = &o;
    if (!option) {
      for (std::string_view j : k_nvcc_joinable)
        if (has_prefix(arg, j) && arg.size() > j.size()) {
          for (auto& o : k_nvcc_options)
            if (o.short_name == j) option = &o;
          name = std::string(j);
          value = arg.substr(j.size());
          has_value = true;
          break;
        }
    }
    if (!option && forward_unknown && host_flag(arg)) {
      // CMake's CUDA rules pass -forward-unknown-to-host-compiler: an option nvcc does not know
      // goes to the host compiler, and kiln keys it as the host compiler's (parse_gcc's table).
      if (has_prefix(arg, "-g") && arg != "-g0") p.cmd.debug_info = true;
      p.key("host\x1f" + arg);
      continue;
    }
    if (!option) return p.refuse("unknown option " + arg.substr(0, std::min<size_t>(arg.size(), 48)));
    bool takes_value = option->kind != NvKind::kFlag && option->kind != NvKind::kRefuse && option->kind != NvKind::kMode &&
                       option->kind != NvKind::kDepGen;
    if (takes_value && !has_value) {
      if (i + 1 >= a.size()) return p.refuse(arg + " without its value");
      value = a[++i];
    }
    std::string canonical(option->short_name);
    switch (option->kind) {
      case NvKind::kRefuse: return p.refuse(canonical);
      case NvKind::kMode:
        if (!p.cmd.mode.empty() && p.cmd.mode != option->mode) return p.refuse("two output modes");
        p.cmd.mode = std::string(option->mode);
        p.key(canonical);
        break;
      case NvKind::kOutput: p.cmd.output = value; break;
      case NvKind::kDepGen:
        p.asked_depfile = true;
        p.cmd.dep_option_at.push_back(i);
        break;
      case NvKind::kDepFile:
        p.cmd.depfile = value;
        p.cmd.dep_option_at.push_back(has_value && arg.find('=') != std::string::npos ? i : i - 1);
        if (!(has_value && arg.find('=') != std::string::npos)) p.cmd.dep_option_at.push_back(i);
        break;
      case NvKind::kDepTarget: p.key_path(canonical, value); break;
      case NvKind::kHostCompiler: p.cmd.host_compiler = value; break;  // in the identity, not the arguments
      case NvKind::kInclude: p.include_dir(canonical, value); break;
      case NvKind::kPath: p.key_path(canonical, value); break;
      case NvKind::kValue:
        if (canonical != "-Xcompiler" && names_this_host(value)) return p.refuse(canonical + " native");
        if (canonical == "-Xcompiler") {
          // The host compiler's options, ','-separated: each held to what parse_gcc refuses.
          for (size_t at = 0; at <= value.size();) {
            size_t comma = std::min(value.find(',', at), value.size());
            std::string item = value.substr(at, comma - at);
            at = comma + 1;
            bool refused = item.empty() ? false
                                        : item[0] == '@' || has_prefix(item, "-M") || has_prefix(item, "-E") || names_this_host(item) ||
                                              std::any_of(k_gcc_refused.begin(), k_gcc_refused.end(),
                                                          [&](std::string_view r) { return has_prefix(item, r); });
            if (refused) return p.refuse("-Xcompiler " + item.substr(0, 32));
          }
        }
        if (canonical == "-Xcompiler" && value.find("-g") != std::string::npos) p.cmd.debug_info = true;
        p.key(canonical + "\x1f" + value);
        break;
      case NvKind::kFlag:
        if (canonical == "-g" || canonical == "-G" || canonical == "-lineinfo") p.cmd.debug_info = true;
        p.key(canonical);
        break;
    }
  }
  if (p.cmd.mode.empty()) return p.refuse("link (no -c, -dc, -cubin, -ptx or -fatbin)");
}

}  // namespace

std::vector<std::string> CompileCommand::compile_args(const std::string& dep_out) const {
  std::vector<std::string> out;
  out.reserve(args.size() + 4);
  for (size_t i = 0; i < args.size(); ++i)
    if (std::find(dep_option_at.begin(), dep_option_at.end(), i) == dep_option_at.end()) out.push_back(args[i]);
  if (family == CompilerFamily::kNvcc) {
    out.insert(out.end(), {"--generate-dependencies-with-compile", "--dependency-output", dep_out});
  } else {
    out.insert(out.end(), {"-MD", "-MF", dep_out});
  }
  return out;
}

std::variant<CompileCommand, NotCacheable> parse_compile_command(CompilerFamily family, const std::vector<std::string>& args,
                                                                 const PathLabels& paths) {
  Parse p{paths, args, {}, {}, {}, false};
  p.cmd.family = family;
  p.cmd.args = args;
  if (family == CompilerFamily::kNvcc) parse_nvcc(p);
  else parse_gcc(p);
  if (p.fail) return NotCacheable{*p.fail};
  if (p.inputs.size() != 1) return NotCacheable{p.inputs.empty() ? "no source" : "several inputs"};
  if (!is_source_name(p.inputs[0], family)) return NotCacheable{"input is not a source (a link?)"};
  if (p.asked_depfile != !p.cmd.depfile.empty()) return NotCacheable{p.asked_depfile ? "-MD without -MF" : "-MF without -MD"};
  p.cmd.source = p.inputs[0];
  if (p.cmd.output.empty()) {
    static const std::pair<std::string_view, std::string_view> k_default_ext[] = {
        {"object", ".o"}, {"rdc-object", ".o"}, {"cubin", ".cubin"}, {"ptx", ".ptx"}, {"fatbin", ".fatbin"}};
    for (auto& [mode, ext] : k_default_ext)
      if (p.cmd.mode == mode) p.cmd.output = replace_extension(p.cmd.source, std::string(ext));
  }
  if (p.cmd.output == "-" || p.cmd.output == "/dev/null") return NotCacheable{"output is not a file"};
  // The output's name enters the key as a label: nvcc names device code after it (-dc), and a
  // depfile's target is it.
  p.key_path("output", p.cmd.output);
  return std::move(p.cmd);
}

}  // namespace kiln::launcher
