// TOML -> OpSpec, with every error as "file:line:col: message".
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "support/toml.h"

#include "builders/expr.h"
#include "builders/spec.h"
#include "builders/target.h"
#include "support/file_util.h"

namespace kiln::builders {

std::string SourcePos::str() const {
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

Status spec_error(const SourcePos& pos, const std::string& message) { return invalid_argument(pos.str() + ": " + message); }


const std::string& EntryPoint::instance_for(std::string_view backend) const {
  static const std::string k_none;
  // hip targets compile the [cuda] sources, so they take the cuda instance.
  auto it = instances.find(std::string(backend == "hip" ? "cuda" : backend));
  return it == instances.end() ? k_none : it->second;
}

const EntryPoint* OpSpec::find_entry(const std::string& n) const {
  for (auto& e : entries)
    if (e.name == n) return &e;
  return nullptr;
}

const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::kBool: return "bool";
    case ScalarType::kInt8: return "int8_t";
    case ScalarType::kUInt8: return "uint8_t";
    case ScalarType::kInt16: return "int16_t";
    case ScalarType::kUInt16: return "uint16_t";
    case ScalarType::kInt32: return "int32_t";
    case ScalarType::kUInt32: return "uint32_t";
    case ScalarType::kInt64: return "int64_t";
    case ScalarType::kUInt64: return "uint64_t";
    case ScalarType::kFloat16: return "half";
    case ScalarType::kBFloat16: return "bfloat16";
    case ScalarType::kFloat: return "float";
    case ScalarType::kDouble: return "double";
    case ScalarType::kVoid: return "void";
  }
  return "void";
}

uint32_t scalar_size(ScalarType t) {
  switch (t) {
    case ScalarType::kBool:
    case ScalarType::kInt8:
    case ScalarType::kUInt8: return 1;
    case ScalarType::kInt16:
    case ScalarType::kUInt16:
    case ScalarType::kFloat16:
    case ScalarType::kBFloat16: return 2;
    case ScalarType::kInt32:
    case ScalarType::kUInt32:
    case ScalarType::kFloat: return 4;
    case ScalarType::kInt64:
    case ScalarType::kUInt64:
    case ScalarType::kDouble: return 8;
    case ScalarType::kVoid: return 0;
  }
  return 0;
}

namespace {

// ---- The options a spec's flags may give its C++ compile: code generation and diagnostics, from
// explicit lists, as ccache's argument processing keeps one table of what each option means.
// kiln decides the target, the language, the outputs and what the compiler reads, so an option
// outside these lists is a spec error naming it. Among those refused: every option that writes or
// reads a file (-o, -MD, -MF, -Wp,-MD,PATH, -include, @FILE, --sysroot, -B, -specs, -fplugin,
// -fprofile-use=, -fprofile-generate, -save-temps, -gsplit-dwarf, -ftime-trace, -fstack-usage),
// every one that hands text to another tool (-Wp, -Wl, -Wa, -Xclang, -Xlinker, -mllvm), and those
// that set the target (-march, -mcpu, -mtune, -target). -m options are target.cpp's list (the
// x86-64 levels' instruction sets and code-generation-only -m options).

// Whole options.
constexpr std::string_view k_exact_flags[] = {
    "-O", "-O0", "-O1", "-O2", "-O3", "-Os", "-Oz", "-Og", "-Ofast",                         // optimisation
    "-g", "-g0", "-g1", "-g2", "-g3", "-ggdb", "-ggdb0", "-ggdb1", "-ggdb2", "-ggdb3",         // debug info
    "-gline-tables-only", "-gline-directives-only", "-gdwarf", "-gdwarf-4", "-gdwarf-5",      //
    "-gcolumn-info", "-gno-column-info", "-w", "-pedantic", "-pedantic-errors"};              // diagnostics
// -f options, each also as -fno-NAME; those ending in '=' take a value (letters, digits, _ . , + -).
constexpr std::string_view k_f_options[] = {
    // floating point
    "fast-math", "finite-math-only", "math-errno", "signed-zeros", "trapping-math", "associative-math", "reciprocal-math",
    "honor-infinities", "honor-nans", "approx-func", "unsafe-math-optimizations", "rounding-math", "fp-contract=",
    "fp-model=", "fp-eval-method=", "fp-exception-behavior=", "denormal-fp-math=", "denormal-fp-math-f32=",
    "excess-precision=", "complex-arithmetic=", "cx-limited-range", "cx-fortran-rules", "strict-float-cast-overflow",
    // loops, inlining, aliasing
    "unroll-loops", "vectorize", "slp-vectorize", "tree-vectorize", "tree-slp-vectorize", "openmp-simd", "inline-functions",
    "inline-hint-functions", "inline", "builtin", "jump-tables", "strict-aliasing", "strict-overflow", "wrapv", "trapv",
    "finite-loops", "optimize-sibling-calls", "omit-frame-pointer", "merge-all-constants", "delete-null-pointer-checks",
    "strict-enums", "strict-vtable-pointers", "assume-sane-operator-new",
    // sections, linkage, code model
    "function-sections", "data-sections", "unique-section-names", "PIC", "pic", "PIE", "pie", "plt", "semantic-interposition",
    "common", "visibility=", "visibility-inlines-hidden", "exceptions", "cxx-exceptions", "rtti", "asynchronous-unwind-tables",
    "unwind-tables", "stack-protector", "stack-protector-strong", "stack-protector-all", "stack-clash-protection",
    "zero-call-used-regs=", "cf-protection", "cf-protection=", "threadsafe-statics", "use-cxa-atexit", "elide-constructors",
    "sized-deallocation", "aligned-allocation", "char8_t", "signed-char", "unsigned-char", "short-enums",
    "lax-vector-conversions=",
    // compiler limits and diagnostics
    "constexpr-steps=", "constexpr-depth=", "template-depth=", "bracket-depth=", "color-diagnostics", "diagnostics-color",
    "diagnostics-color=", "diagnostics-show-option", "show-column", "caret-diagnostics", "macro-backtrace-limit=",
    "template-backtrace-limit=", "error-limit=", "max-errors="};

// Letters, digits and `extra`: a value that cannot be a path (no '/', no '@').
bool plain_chars(std::string_view s, std::string_view extra) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && extra.find(c) == std::string_view::npos) return false;
  return true;
}

}  // namespace

std::string refused_spec_flag(std::string_view flag) {
  const std::string generic =
      "flags may tune code generation only: -O*, -g*, -W<warning>, and the -f and -m options kiln lists "
      "(builders/spec_parser.cpp); kiln sets the target, language and outputs itself";
  for (std::string_view pass : {"-Wp,", "-Wl,", "-Wa,", "-Xclang", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-mllvm"})
    if (flag.substr(0, pass.size()) == pass)
      return "it hands options to another tool (the preprocessor, linker or assembler, which can write files: -Wp,-MD,PATH), "
             "and kiln runs those itself; " + generic;
  for (std::string_view exact : k_exact_flags)
    if (flag == exact) return {};
  if (flag.substr(0, 2) == "-W") {
    // A warning, -Wno-NAME, -Werror=NAME, -Wframe-larger-than=N: a name and perhaps a number.
    std::string_view w = flag.substr(2);
    size_t eq = w.find('=');
    if (plain_chars(w.substr(0, eq), "_+-") && (eq == std::string_view::npos || plain_chars(w.substr(eq + 1), "_+-")))
      return {};
    return generic;
  }
  if (flag.substr(0, 2) == "-f") {
    std::string_view f = flag.substr(2);
    bool negated = f.substr(0, 3) == "no-";
    if (negated) f.remove_prefix(3);
    size_t eq = f.find('=');
    std::string_view name = eq == std::string_view::npos ? f : f.substr(0, eq + 1);
    for (std::string_view known : k_f_options) {
      if (name != known) continue;
      if (eq == std::string_view::npos) return {};
      if (!negated && plain_chars(f.substr(eq + 1), "_.,+-")) return {};
    }
    return generic;
  }
  if (flag.substr(0, 2) == "-m" && flag.size() > 2) {
    for (std::string_view target : {"-march", "-mcpu", "-mtune"})
      if (flag.substr(0, target.size()) == target) return generic;
    // Which -m options (builders/target.cpp's cpu_level_for_flag says, with its own message).
    if (plain_chars(flag.substr(2), "_.,=+-")) return {};
  }
  return generic;
}

namespace {

std::optional<ScalarType> scalar_from_name(std::string_view n) {
  static const std::map<std::string_view, ScalarType> k_names = {
      {"bool", ScalarType::kBool},       {"int8_t", ScalarType::kInt8},     {"uint8_t", ScalarType::kUInt8},
      {"int16_t", ScalarType::kInt16},   {"uint16_t", ScalarType::kUInt16}, {"int32_t", ScalarType::kInt32},
      {"int", ScalarType::kInt32},       {"uint32_t", ScalarType::kUInt32}, {"unsigned", ScalarType::kUInt32},
      {"int64_t", ScalarType::kInt64},   {"uint64_t", ScalarType::kUInt64}, {"size_t", ScalarType::kUInt64},
      {"float", ScalarType::kFloat},     {"double", ScalarType::kDouble},   {"void", ScalarType::kVoid},
      {"half", ScalarType::kFloat16},    {"_Float16", ScalarType::kFloat16}, {"bfloat16", ScalarType::kBFloat16},
      {"__bf16", ScalarType::kBFloat16},
  };
  auto it = k_names.find(n);
  if (it == k_names.end()) return std::nullopt;
  return it->second;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

class SpecParser {
 public:
  SpecParser(std::string path) : m_path(std::move(path)) {}

  Result<OpSpec> parse(const std::string& text) {
    KILN_ASSIGN_OR_RETURN(toml::table root, parse_toml(text, m_path, "a spec"));
    OpSpec spec;
    spec.spec_path = m_path;
    spec.spec_dir = dirname_of(m_path);
    KILN_RETURN_IF_ERROR(check_keys(root, {"name", "version", "language", "description", "sources", "include_dirs",
                                           "defines", "flags", "entry", "check", "cuda", "opencl"}));
    KILN_ASSIGN_OR_RETURN(spec.name, required_string(root, "name"));
    if (!is_identifier(spec.name))
      return spec_error(pos_of(*root.get("name")), "op name '" + spec.name + "' must be an identifier ([A-Za-z_][A-Za-z0-9_]*)");
    if (auto* v = root.get("version")) {
      auto i = v->value<int64_t>();
      if (!v->is_integer() || *i < 0) return spec_error(pos_of(*v), "version must be a non-negative integer");
      spec.version = *i;
    }
    KILN_ASSIGN_OR_RETURN(spec.language, required_string(root, "language"));
    if (spec.language != "cpp")
      return spec_error(pos_of(*root.get("language")),
                        "unknown language '" + spec.language + "' (this kiln compiles: cpp)");
    if (auto* v = root.get("description")) {
      if (!v->is_string()) return spec_error(pos_of(*v), "description must be a string");
      spec.description = **v->as_string();
    }
    KILN_RETURN_IF_ERROR(parse_sources(root, spec));
    KILN_RETURN_IF_ERROR(parse_include_dirs(root, spec));
    KILN_ASSIGN_OR_RETURN(spec.defines, string_list(root, "defines"));
    for (size_t i = 0; i < spec.defines.size(); ++i) {
      std::string_view d = spec.defines[i];
      if (!is_identifier(d.substr(0, d.find('='))))
        return spec_error(pos_of(*root["defines"].as_array()->get(i)), "define '" + spec.defines[i] + "' must be NAME or NAME=VALUE");
    }
    KILN_ASSIGN_OR_RETURN(spec.flags, string_list(root, "flags"));
    for (size_t i = 0; i < spec.flags.size(); ++i) KILN_RETURN_IF_ERROR(check_flag(spec.flags[i], *root["flags"].as_array()->get(i)));
    KILN_RETURN_IF_ERROR(parse_entries(root, spec));
    if (auto* check = root.get("check")) KILN_RETURN_IF_ERROR(parse_check(*check, spec));
    if (auto* cuda = root.get("cuda")) KILN_RETURN_IF_ERROR(parse_cuda(*cuda, spec));
    if (auto* opencl = root.get("opencl")) KILN_RETURN_IF_ERROR(parse_opencl(*opencl, spec));
    return spec;
  }

 private:
  SourcePos pos_of(const toml::node& n) const {
    // The root table has no position of its own: point at the file's start.
    if (n.source().begin.line == 0) return {m_path, 1, 1};
    return {m_path, n.source().begin.line, n.source().begin.column};
  }

  Status check_keys(const toml::table& t, std::initializer_list<std::string_view> allowed) const {
    for (auto&& [key, value] : t) {
      bool known = false;
      for (auto a : allowed) known = known || key.str() == a;
      if (!known) {
        std::string list;
        for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        SourcePos pos{m_path, key.source().begin.line, key.source().begin.column};
        if (pos.line == 0) pos = pos_of(value);
        return spec_error(pos, "unknown key '" + std::string(key.str()) + "' (allowed here: " + list + ")");
      }
    }
    return {};
  }

  Result<std::string> required_string(const toml::table& t, std::string_view key) const {
    auto* v = t.get(key);
    if (!v) return spec_error(pos_of(t), "missing required key '" + std::string(key) + "'");
    if (!v->is_string()) return spec_error(pos_of(*v), "'" + std::string(key) + "' must be a string");
    std::string s = **v->as_string();
    if (s.empty()) return spec_error(pos_of(*v), "'" + std::string(key) + "' must not be empty");
    return s;
  }

  Result<std::vector<std::string>> string_list(const toml::table& t, std::string_view key) const {
    std::vector<std::string> out;
    auto* v = t.get(key);
    if (!v) return out;
    auto* arr = v->as_array();
    if (!arr) return spec_error(pos_of(*v), "'" + std::string(key) + "' must be an array of strings");
    for (auto& item : *arr) {
      if (!item.is_string()) return spec_error(pos_of(item), "'" + std::string(key) + "' must hold only strings");
      out.push_back(**item.as_string());
    }
    return out;
  }

  Status check_flag(const std::string& flag, const toml::node& where) const {
    // OpenMP threads inside a kernel would compete with the worker pool that already runs the
    // launch's blocks on every core (and need a runtime kiln does not link). SIMD pragmas are fine.
    if (flag == "-fopenmp" || (flag.rfind("-fopenmp", 0) == 0 && flag.rfind("-fopenmp-simd", 0) != 0))
      return spec_error(pos_of(where), "flag '" + flag +
                                           "' is not allowed: kiln's CPU backend already runs a launch's blocks on all "
                                           "cores, and OpenMP threads inside a kernel would fight its workers for them; "
                                           "use -fopenmp-simd for '#pragma omp simd', and more blocks for parallelism");
    // kiln decides outputs, language and target; a spec may tune code generation only.
    if (std::string why = refused_spec_flag(flag); !why.empty())
      return spec_error(pos_of(where), "flag '" + flag + "' is not allowed: " + why);
    // An instruction set flag raises the cpu level the artifact needs; one outside the levels
    // is refused (builders/target.h).
    if (auto level = cpu_level_for_flag(flag); !level.ok()) return spec_error(pos_of(where), level.status().message());
    return {};
  }

  // A relative path inside the spec's folder, also after following symlinks.
  Result<std::string> resolve_inside(const std::string& rel, const toml::node& where, const char* what) const {
    if (rel.empty()) return spec_error(pos_of(where), std::string(what) + " path is empty");
    if (rel[0] == '/')
      return spec_error(pos_of(where), std::string(what) + " path '" + rel + "' must be relative to the spec's folder");
    std::string abs = absolute_path(m_dir() + "/" + rel);
    if (!path_is_within(abs, m_dir()))
      return spec_error(pos_of(where), std::string(what) + " path '" + rel + "' escapes the spec's folder " + m_dir());
    // Through symlinks too, for what exists (what does not is reported as missing after this).
    char real[PATH_MAX];
    if (::realpath(abs.c_str(), real) && !path_is_within(real, m_real_dir()))
      return spec_error(pos_of(where), std::string(what) + " path '" + rel + "' escapes the spec's folder " + m_dir());
    return abs;
  }

  // The spec's folder, and where it really is (symlinks resolved): worked out once per spec.
  const std::string& m_dir() const {
    if (m_dir_cache.empty()) m_dir_cache = dirname_of(absolute_path(m_path));
    return m_dir_cache;
  }
  const std::string& m_real_dir() const {
    if (m_real_dir_cache.empty()) {
      char real[PATH_MAX];
      m_real_dir_cache = ::realpath(m_dir().c_str(), real) ? real : m_dir();
    }
    return m_real_dir_cache;
  }
  mutable std::string m_dir_cache, m_real_dir_cache;

  Status parse_sources(const toml::table& root, OpSpec& spec) { return parse_source_list(root, spec.sources); }

  Status parse_source_list(const toml::table& root, std::vector<SourceSpec>& sources) {
    auto* v = root.get("sources");
    if (!v) return spec_error(pos_of(root), "missing required key 'sources'");
    auto* arr = v->as_array();
    if (!arr || arr->empty()) return spec_error(pos_of(*v), "'sources' must be a non-empty array");
    for (auto& item : *arr) {
      SourceSpec src;
      src.pos = pos_of(item);
      if (item.is_string()) {
        std::string rel = **item.as_string();
        KILN_ASSIGN_OR_RETURN(src.path, resolve_inside(rel, item, "source"));
        struct stat st{};
        if (::stat(src.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
          return spec_error(src.pos, "source file '" + rel + "' not found (looked for " + src.path + ")");
        src.rel_path = relative_to(src.path, m_dir());
      } else if (auto* t = item.as_table()) {
        KILN_RETURN_IF_ERROR(check_keys(*t, {"name", "code"}));
        KILN_ASSIGN_OR_RETURN(std::string name, required_string(*t, "name"));
        KILN_ASSIGN_OR_RETURN(std::string code, required_string(*t, "code"));
        if (name.find('/') != std::string::npos || name == "." || name == "..")
          return spec_error(pos_of(*t->get("name")), "an inline source's name is a file name, without folders");
        src.path = m_dir() + "/" + name;
        src.rel_path = name;
        src.inline_text = code;
      } else {
        return spec_error(src.pos, "a source is a path (string) or an inline table { name = \"x.cpp\", code = \"...\" }");
      }
      for (auto& other : sources)
        if (other.path == src.path) return spec_error(src.pos, "source '" + src.rel_path + "' is listed twice");
      sources.push_back(std::move(src));
    }
    return {};
  }

  Status parse_include_dirs(const toml::table& root, OpSpec& spec) {
    KILN_ASSIGN_OR_RETURN(auto dirs, string_list(root, "include_dirs"));
    for (size_t i = 0; i < dirs.size(); ++i) {
      const toml::node& where = *root["include_dirs"].as_array()->get(i);
      KILN_ASSIGN_OR_RETURN(std::string abs, resolve_inside(dirs[i], where, "include"));
      struct stat st{};
      if (::stat(abs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return spec_error(pos_of(where), "include folder '" + dirs[i] + "' not found (looked for " + abs + ")");
      spec.include_dirs.push_back(abs);
    }
    return {};
  }

  Result<ParamSpec> parse_param(const toml::node& item) const {
    ParamSpec p;
    p.pos = pos_of(item);
    if (!item.is_string()) return spec_error(p.pos, "a parameter is a string such as \"const float* x\"");
    std::string text = **item.as_string();
    // Split off the trailing identifier as the name.
    size_t end = text.find_last_not_of(" \t");
    if (end == std::string::npos) return spec_error(p.pos, "empty parameter");
    size_t start = end + 1;
    while (start > 0 && (std::isalnum(static_cast<unsigned char>(text[start - 1])) || text[start - 1] == '_')) --start;
    p.name = text.substr(start, end + 1 - start);
    std::string type = text.substr(0, start);
    if (!is_identifier(p.name) || type.find_first_not_of(" \t") == std::string::npos)
      return spec_error(p.pos, "parameter '" + text + "' must be a type followed by a name, e.g. \"const float* x\"");
    // Tokens of the type: [const] BASE [*]
    std::vector<std::string> tokens;
    std::string cur;
    for (char c : type) {
      if (c == '*') {
        if (!cur.empty()) tokens.push_back(cur);
        cur.clear();
        tokens.push_back("*");
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        if (!cur.empty()) tokens.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) tokens.push_back(cur);
    bool is_const = false;
    size_t i = 0;
    if (i < tokens.size() && tokens[i] == "const") {
      is_const = true;
      ++i;
    }
    auto bad = [&] {
      return spec_error(p.pos, "unsupported parameter type '" + type.substr(0, type.find_last_not_of(" \t") + 1) +
                                   "': use a scalar (bool, int8_t..uint64_t, int, unsigned, size_t, half, bfloat16, float, double) "
                                   "or a pointer to one (or void*), optionally const");
    };
    if (i >= tokens.size()) return bad();
    auto scalar = scalar_from_name(tokens[i++]);
    if (!scalar) return bad();
    if (i < tokens.size() && tokens[i] == "*") {
      p.is_pointer = true;
      ++i;
    }
    if (i != tokens.size()) return bad();
    if (*scalar == ScalarType::kVoid && !p.is_pointer) return bad();
    p.scalar = *scalar;
    // As the generated CPU entry declares it: the name written, but Clang's names for the
    // half types (a CUDA kernel spells them __half and __nv_bfloat16; only sizes cross).
    std::string base = *scalar == ScalarType::kFloat16    ? "_Float16"
                       : *scalar == ScalarType::kBFloat16 ? "__bf16"
                                                          : tokens[is_const ? 1 : 0];
    p.type = std::string(is_const ? "const " : "") + base + (p.is_pointer ? "*" : "");
    p.size = p.is_pointer ? sizeof(void*) : scalar_size(*scalar);
    return p;
  }

  Status parse_entries(const toml::table& root, OpSpec& spec) {
    auto* v = root.get("entry");
    if (!v) return spec_error(pos_of(root), "missing [[entry]]: an op needs at least one entry point");
    auto* arr = v->as_array();
    if (!arr || arr->empty()) return spec_error(pos_of(*v), "'entry' must be an array of tables ([[entry]])");
    for (auto& item : *arr) {
      auto* t = item.as_table();
      if (!t) return spec_error(pos_of(item), "each entry is a table with 'name' and 'params'");
      KILN_RETURN_IF_ERROR(check_keys(*t, {"name", "params", "name_expression"}));
      EntryPoint e;
      e.pos = pos_of(item);
      KILN_ASSIGN_OR_RETURN(e.name, required_string(*t, "name"));
      if (!is_identifier(e.name)) return spec_error(pos_of(*t->get("name")), "entry name '" + e.name + "' must be an identifier");
      if (spec.find_entry(e.name)) return spec_error(pos_of(*t->get("name")), "entry '" + e.name + "' is defined twice");
      if (auto* ne = t->get("name_expression")) {
        if (ne->is_string()) {
          KILN_ASSIGN_OR_RETURN(std::string expr, required_string(*t, "name_expression"));
          e.instances = {{"cpu", expr}, {"cuda", expr}};
        } else if (auto* per = ne->as_table()) {
          KILN_RETURN_IF_ERROR(check_keys(*per, {"cpu", "cuda"}));
          for (auto&& [backend, value] : *per) {
            KILN_ASSIGN_OR_RETURN(std::string expr, required_string(*per, backend.str()));
            e.instances[std::string(backend.str())] = expr;
          }
        } else {
          return spec_error(pos_of(*ne), "name_expression is a template instance such as \"softmax<float, 256>\", "
                                         "or a table of them by backend: { cpu = \"...\", cuda = \"...\" }");
        }
      }
      auto* params = t->get("params");
      if (!params || !params->is_array()) return spec_error(e.pos, "entry '" + e.name + "' needs 'params', an array of strings");
      std::set<std::string> names;
      for (auto& p : *params->as_array()) {
        KILN_ASSIGN_OR_RETURN(ParamSpec param, parse_param(p));
        if (!names.insert(param.name).second) return spec_error(param.pos, "parameter '" + param.name + "' is named twice");
        e.params.push_back(std::move(param));
      }
      spec.entries.push_back(std::move(e));
    }
    return {};
  }

  Status parse_check(const toml::node& node, OpSpec& spec) {
    auto* t = node.as_table();
    if (!t) return spec_error(pos_of(node), "'check' must be a table");
    KILN_RETURN_IF_ERROR(
        check_keys(*t, {"dims", "entry", "reference", "block", "grid", "shared_bytes", "buffers", "args", "rtol", "atol"}));
    CheckSpec c;
    c.pos = pos_of(node);
    if (auto* dims = t->get("dims")) {
      auto* dt = dims->as_table();
      if (!dt) return spec_error(pos_of(*dims), "'dims' must be a table of names to integers, e.g. { n = 1000 }");
      for (auto&& [k, v] : *dt) {
        if (!v.is_integer() || *v.value<int64_t>() < 0)
          return spec_error(pos_of(v), "dim '" + std::string(k.str()) + "' must be a non-negative integer");
        if (!is_identifier(k.str()) || k.str() == "block" || k.str() == "sm_count")
          return spec_error(pos_of(v), "dim name '" + std::string(k.str()) + "' must be an identifier other than 'block' and 'sm_count'");
        c.dims[std::string(k.str())] = *v.value<int64_t>();
      }
    }
    c.entry = spec.entries.front().name;
    if (t->get("entry")) {
      KILN_ASSIGN_OR_RETURN(c.entry, required_string(*t, "entry"));
    }
    const EntryPoint* entry = spec.find_entry(c.entry);
    if (!entry) return spec_error(pos_of(*t->get("entry")), "check.entry '" + c.entry + "' is not an [[entry]] of this op");
    KILN_ASSIGN_OR_RETURN(c.reference, required_string(*t, "reference"));
    if (!is_identifier(c.reference) || spec.find_entry(c.reference))
      return spec_error(pos_of(*t->get("reference")), "reference '" + c.reference + "' must be an identifier naming a host function, not an entry");
    if (auto* b = t->get("block")) {
      if (!b->is_integer() || *b->value<int64_t>() < 1 || *b->value<int64_t>() > 65536)
        return spec_error(pos_of(*b), "block must be an integer from 1 to 65536");
      c.block = static_cast<uint32_t>(*b->value<int64_t>());
    }
    KILN_ASSIGN_OR_RETURN(c.grid, required_string(*t, "grid"));
    auto names = c.dims;
    names["block"] = c.block;
    names["sm_count"] = 1;  // the device's, known at launch
    if (auto g = eval_expr(c.grid, names); !g.ok()) return spec_error(pos_of(*t->get("grid")), "grid: " + g.status().message());
    if (auto* sb = t->get("shared_bytes")) {
      if (sb->is_integer()) c.shared_bytes = std::to_string(**sb->as_integer());
      else if (sb->is_string()) c.shared_bytes = **sb->as_string();
      else return spec_error(pos_of(*sb), "shared_bytes is a number or an expression such as \"block * 4\"");
      if (auto v = eval_expr(c.shared_bytes, names); !v.ok() || *v < 0 || *v > UINT32_MAX)
        return spec_error(pos_of(*sb), "shared_bytes: " + (v.ok() ? "must be 0 to 4 GiB" : v.status().message()));
    }
    for (const char* tol : {"rtol", "atol"}) {
      if (auto* v = t->get(tol)) {
        auto d = v->value<double>();
        if (!d || *d < 0) return spec_error(pos_of(*v), std::string(tol) + " must be a non-negative number");
        (std::string(tol) == "rtol" ? c.rtol : c.atol) = *d;
      }
    }
    auto* buffers = t->get("buffers");
    if (!buffers || !buffers->is_array()) return spec_error(c.pos, "check needs 'buffers', an array of tables");
    for (auto& item : *buffers->as_array()) {
      auto* bt = item.as_table();
      if (!bt) return spec_error(pos_of(item), "a buffer is a table { name, type, count, init, output }");
      KILN_RETURN_IF_ERROR(check_keys(*bt, {"name", "type", "count", "init", "output"}));
      CheckBuffer b;
      b.pos = pos_of(item);
      KILN_ASSIGN_OR_RETURN(b.name, required_string(*bt, "name"));
      KILN_ASSIGN_OR_RETURN(std::string type, required_string(*bt, "type"));
      auto scalar = scalar_from_name(type);
      if (!scalar || *scalar == ScalarType::kVoid || *scalar == ScalarType::kBool)
        return spec_error(pos_of(*bt->get("type")), "buffer type '" + type + "' must be an integer or floating-point type");
      b.type = *scalar;
      KILN_ASSIGN_OR_RETURN(b.count, required_string(*bt, "count"));
      if (auto n = eval_expr(b.count, names); !n.ok() || *n < 1)
        return spec_error(pos_of(*bt->get("count")), "count: " + (n.ok() ? "must be at least 1" : n.status().message()));
      b.init = "random";
      if (bt->get("init")) {
        KILN_ASSIGN_OR_RETURN(b.init, required_string(*bt, "init"));
      }
      if (b.init != "random" && b.init != "zero" && b.init != "ones" && b.init != "positive")
        return spec_error(pos_of(*bt->get("init")), "init must be \"random\", \"positive\", \"zero\" or \"ones\"");
      if (auto* o = bt->get("output")) {
        if (!o->is_boolean()) return spec_error(pos_of(*o), "output must be true or false");
        b.output = **o->as_boolean();
      }
      for (auto& other : c.buffers)
        if (other.name == b.name) return spec_error(b.pos, "buffer '" + b.name + "' is defined twice");
      c.buffers.push_back(std::move(b));
    }
    auto* args = t->get("args");
    if (!args || !args->is_array()) return spec_error(c.pos, "check needs 'args', one per parameter of entry '" + c.entry + "'");
    auto* arr = args->as_array();
    if (arr->size() != entry->params.size())
      return spec_error(pos_of(*args), "check.args has " + std::to_string(arr->size()) + " items, entry '" + c.entry + "' has " +
                                           std::to_string(entry->params.size()) + " parameters");
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& a = *arr->get(i);
      const ParamSpec& p = entry->params[i];
      std::string value;
      if (a.is_string()) value = **a.as_string();
      else if (a.is_integer()) value = std::to_string(**a.as_integer());
      else if (a.is_floating_point()) value = std::to_string(**a.as_floating_point());
      else return spec_error(pos_of(a), "an arg is a buffer name, an expression or a number");
      bool is_buffer = false;
      for (auto& b : c.buffers) is_buffer = is_buffer || b.name == value;
      if (p.is_pointer != is_buffer)
        return spec_error(pos_of(a), "parameter '" + p.name + "' (" + p.type + ") needs " +
                                         (p.is_pointer ? "a buffer name" : "a number or expression, not a buffer"));
      // A number with a fraction or exponent ("1.5", 2e-3) is taken as it is; else an integer
      // expression over the dims.
      char* end = nullptr;
      std::strtod(value.c_str(), &end);
      bool literal = a.is_floating_point() ||
                     (end && *end == '\0' && !value.empty() && value.find_first_of(".eE") != std::string::npos);
      if (!is_buffer && !literal) {
        if (auto v = eval_expr(value, names); !v.ok()) return spec_error(pos_of(a), v.status().message());
      }
      c.args.push_back(value);
    }
    spec.check = std::move(c);
    return {};
  }

  Status parse_cuda(const toml::node& node, OpSpec& spec) {
    auto* t = node.as_table();
    if (!t) return spec_error(pos_of(node), "'cuda' must be a table ([cuda])");
    KILN_RETURN_IF_ERROR(check_keys(*t, {"sources", "defines", "flags", "min_sm", "block", "grid", "toolchain"}));
    CudaSpec c;
    c.pos = pos_of(node);
    // Several sources are linked as relocatable device code (builders/op_builder.h).
    KILN_RETURN_IF_ERROR(parse_source_list(*t, c.sources));
    KILN_ASSIGN_OR_RETURN(c.defines, string_list(*t, "defines"));
    KILN_ASSIGN_OR_RETURN(c.flags, string_list(*t, "flags"));
    for (size_t i = 0; i < c.flags.size(); ++i) {
      const std::string& f = c.flags[i];
      static const char* k_allowed[] = {"--use_fast_math", "-use_fast_math", "-lineinfo", "--ftz=", "--prec-div=",
                                        "--prec-sqrt=", "--fmad=", "-maxrregcount=", "--maxrregcount=", "-O", "-G"};
      bool ok = false;
      for (auto* a : k_allowed) ok = ok || f.rfind(a, 0) == 0;
      if (!ok)
        return spec_error(pos_of(*(*t)["flags"].as_array()->get(i)),
                          "NVRTC flag '" + f + "' is not allowed: use --use_fast_math, -lineinfo, --ftz=, --prec-div=, "
                          "--prec-sqrt=, --fmad=, -maxrregcount=; kiln sets the architecture itself");
    }
    if (auto* m = t->get("min_sm")) {
      auto v = m->value<int64_t>();
      if (!m->is_integer() || *v < 30 || *v > 200) return spec_error(pos_of(*m), "min_sm must be a compute capability such as 70 or 90");
      c.min_sm = static_cast<int>(*v);
    }
    if (auto* b = t->get("block")) {
      auto v = b->value<int64_t>();
      if (!b->is_integer() || *v < 1 || *v > 1024) return spec_error(pos_of(*b), "[cuda] block must be 1 to 1024 threads");
      c.block = static_cast<uint32_t>(*v);
    }
    if (t->get("grid")) {
      KILN_ASSIGN_OR_RETURN(c.grid, required_string(*t, "grid"));
      // The names a launch will give it, with stand-in values: the check's dims, every entry's
      // integer parameters, block and sm_count.
      std::map<std::string, int64_t> names;
      for (auto& e : spec.entries)
        for (auto& p : e.params)
          if (!p.is_pointer && p.scalar >= ScalarType::kInt8 && p.scalar <= ScalarType::kUInt64) names[p.name] = 1;
      if (spec.check)
        for (auto& [k, v] : spec.check->dims) names[k] = v;
      names["block"] = c.block ? c.block : spec.check ? spec.check->block : 256;
      names["sm_count"] = 1;
      if (auto g = eval_expr(c.grid, names); !g.ok())
        return spec_error(pos_of(*t->get("grid")), "[cuda] grid: " + g.status().message() +
                                                       " (it may use the check's dims, the entries' integer parameters, block and sm_count)");
    }
    if (t->get("toolchain")) {
      KILN_ASSIGN_OR_RETURN(c.toolchain, required_string(*t, "toolchain"));
      if (c.toolchain != "auto" && c.toolchain != "nvrtc" && c.toolchain != "clang")
        return spec_error(pos_of(*t->get("toolchain")), "[cuda] toolchain must be \"auto\", \"nvrtc\" or \"clang\"");
    }
    spec.cuda = std::move(c);
    return {};
  }

  Status parse_opencl(const toml::node& node, OpSpec& spec) {
    auto* t = node.as_table();
    if (!t) return spec_error(pos_of(node), "'opencl' must be a table ([opencl])");
    KILN_RETURN_IF_ERROR(check_keys(*t, {"sources", "defines", "flags", "block"}));
    OpenClSpec c;
    c.pos = pos_of(node);
    KILN_RETURN_IF_ERROR(parse_source_list(*t, c.sources));
    if (c.sources.size() != 1)
      return spec_error(c.pos, "[opencl] takes one source file; put what its kernels share in headers it includes");
    KILN_ASSIGN_OR_RETURN(c.defines, string_list(*t, "defines"));
    KILN_ASSIGN_OR_RETURN(c.flags, string_list(*t, "flags"));
    for (size_t i = 0; i < c.flags.size(); ++i) {
      static const char* k_allowed[] = {"-cl-fast-relaxed-math", "-cl-mad-enable", "-cl-no-signed-zeros",
                                        "-cl-finite-math-only", "-cl-unsafe-math-optimizations", "-cl-denorms-are-zero",
                                        "-cl-fp32-correctly-rounded-divide-sqrt"};
      bool ok = false;
      for (auto* a : k_allowed) ok = ok || c.flags[i] == a;
      if (!ok)
        return spec_error(pos_of(*(*t)["flags"].as_array()->get(i)),
                          "OpenCL flag '" + c.flags[i] + "' is not allowed: use -cl-fast-relaxed-math, -cl-mad-enable, "
                          "-cl-no-signed-zeros, -cl-finite-math-only, -cl-unsafe-math-optimizations, -cl-denorms-are-zero or "
                          "-cl-fp32-correctly-rounded-divide-sqrt");
    }
    if (auto* b = t->get("block")) {
      auto v = b->value<int64_t>();
      if (!b->is_integer() || *v < 1 || *v > 1024) return spec_error(pos_of(*b), "[opencl] block must be 1 to 1024 work-items");
      c.block = static_cast<uint32_t>(*v);
    }
    spec.opencl = std::move(c);
    return {};
  }

  std::string m_path;
};

}  // namespace

Result<OpSpec> parse_spec_text(const std::string& text, const std::string& path) {
  return SpecParser(absolute_path(path)).parse(text);
}

Result<OpSpec> parse_spec_file(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return invalid_argument(path + ": cannot read spec: " + text.status().message());
  return parse_spec_text(text.value(), path);
}

}  // namespace kiln::builders
