#include "nvrtc_preload/program_key.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "support/file_memo.h"
#include "support/hash.h"
#include "support/length_prefixed.h"

extern char** environ;

namespace kiln::nvrtc_preload {
namespace {

// NVRTC's options (CUDA 13's "Supported Compile Options") that read nothing outside the include
// search and write nothing: their value, if any, is keyed as written. Each row: the long
// spelling and the short one. An option given with "=value" or, for the one-letter forms (-I,
// -D, -U), with its value attached, matches its row.
constexpr std::array<std::pair<std::string_view, std::string_view>, 51> k_known_options{{
    {"--gpu-architecture", "-arch"}, {"--device-c", "-dc"}, {"--device-w", "-dw"},
    {"--relocatable-device-code", "-rdc"}, {"--extensible-whole-program", "-ewp"}, {"--device-debug", "-G"},
    {"--generate-line-info", "-lineinfo"}, {"--dopt", "-dopt"}, {"--ptxas-options", "-Xptxas"},
    {"--maxrregcount", "-maxrregcount"}, {"--ftz", "-ftz"}, {"--prec-sqrt", "-prec-sqrt"}, {"--prec-div", "-prec-div"},
    {"--fmad", "-fmad"}, {"--use_fast_math", "-use_fast_math"}, {"--extra-device-vectorization", "-extra-device-vectorization"},
    {"--modify-stack-limit", "-modify-stack-limit"}, {"--dlink-time-opt", "-dlto"}, {"--gen-opt-lto", "-gen-opt-lto"},
    {"--optix-ir", "-optix-ir"}, {"--jump-table-density", "-jtd"}, {"--device-stack-protector", "-device-stack-protector"},
    {"--define-macro", "-D"}, {"--undefine-macro", "-U"}, {"--include-path", "-I"}, {"--pre-include", "-include"},
    {"--no-source-include", "-no-source-include"}, {"--std", "-std"}, {"--builtin-move-forward", "-builtin-move-forward"},
    {"--builtin-initializer-list", "-builtin-initializer-list"}, {"--disable-warnings", "-w"}, {"--restrict", "-restrict"},
    {"--device-as-default-execution-space", "-default-device"}, {"--device-int128", "-device-int128"},
    {"--optimization-info", "-opt-info"}, {"--display-error-number", "-err-no"}, {"--no-display-error-number", "-no-err-no"},
    {"--diag-error", "-diag-error"}, {"--diag-suppress", "-diag-suppress"}, {"--diag-warn", "-diag-warn"},
    {"--brief-diagnostics", "-brief-diag"}, {"--fdevice-syntax-only", "-fdevice-syntax-only"},
    {"--minimal", "-minimal"}, {"--Werror", "-Werror"}, {"--Wreorder", "-Wreorder"}, {"--Wno-deprecated-declarations", "-Wno-deprecated-declarations"},
    {"--Wno-deprecated-gpu-targets", "-Wno-deprecated-gpu-targets"}, {"--gen-lto", "-gen-lto"}, {"--lto", "-lto"},
    {"--ptx", "-ptx"}, {"--fdevice-sanitize", "-fdevice-sanitize"},
}};
// Short forms whose value may follow without '=' ("-I/path", "-DNAME=1").
constexpr std::array<std::string_view, 3> k_attached{"-I", "-D", "-U"};

// A key field: its tag, then its value, each length-prefixed (support/length_prefixed.h).
void add_field(std::string& out, std::string_view tag, std::string_view value) {
  put_field(out, tag);
  put_field(out, value);
}

// A count stored as a field (a return code may be negative).
std::optional<int64_t> number(FieldReader& in) {
  std::string_view f;
  if (!in.field_view(f)) return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (ec != std::errc() || end != f.data() + f.size()) return std::nullopt;
  return v;
}
std::optional<std::string_view> next(FieldReader& in) {
  std::string_view f;
  return in.field_view(f) ? std::optional(f) : std::nullopt;
}

constexpr size_t k_max_paths = 65536;
constexpr size_t k_max_paths_bytes = size_t{1} << 20;
constexpr std::array<std::string_view, 6> k_outputs{"ptx", "cubin", "ltoir", "optixir", "tileir", "log"};

}  // namespace

std::string uncacheable_option(std::string_view option) {
  if (option.empty() || option[0] != '-') return "a value without its option";  // "-I", "/x": NVRTC takes "-I/x"
  std::string_view name = option.substr(0, option.find('='));
  if (option.find("apply-controls") != std::string_view::npos) return "ptxas reads a file (--apply-controls)";
  for (auto& [long_form, short_form] : k_known_options)
    if (name == long_form || name == short_form) return "";
  for (auto prefix : k_attached)
    if (option.size() > prefix.size() && option.substr(0, prefix.size()) == prefix) return "";
  if (name.find("pch") != std::string_view::npos) return "precompiled headers (" + std::string(name) + ")";
  return "option " + std::string(name.substr(0, 64));
}

std::string uncacheable_text(std::string_view text) {
  for (std::string_view macro : {"__DATE__", "__TIME__", "__TIMESTAMP__"})
    if (text.find(macro) != std::string_view::npos) return "it names the time of its compile (" + std::string(macro) + ")";
  return "";
}

std::vector<std::string> environment_in_key() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view v(*e);
    for (std::string_view prefix : {"NVRTC", "NVVM", "NV_NVVM", "EDG_", "LLVM_OVERRIDE", "CAN_FINALIZE"})
      if (v.substr(0, prefix.size()) == prefix) {
        out.emplace_back(v);
        break;
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string input_key_text(const ProgramInput& input) {
  std::string out = "kiln-nvrtc-1\n";
  add_field(out, "nvrtc", input.nvrtc_identity);
  add_field(out, "name", input.name);
  add_field(out, "source", input.source);
  for (auto& [name, content] : input.headers) {
    add_field(out, "header-name", name);
    add_field(out, "header", content);
  }
  for (auto& o : input.options) add_field(out, "option", o);
  for (auto& e : input.name_expressions) add_field(out, "name-expression", e);
  for (auto& e : input.environment) add_field(out, "environment", e);
  return out;
}

bool special_path(std::string_view path) {
  for (std::string_view prefix : {"/dev/", "/proc/", "/sys/"})
    if (path.substr(0, prefix.size()) == prefix) return true;
  return false;
}

std::string stamp_of(const struct ::stat& st, std::string_view path) {
  if (special_path(path)) return "special";
  if (S_ISDIR(st.st_mode)) return "dir";
  if (!S_ISREG(st.st_mode)) return "special";
  auto ns = [](const struct timespec& t) { return std::to_string(int64_t{t.tv_sec} * 1000000000 + t.tv_nsec); };
  return "file:" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         ns(st.st_mtim) + ":" + ns(st.st_ctim);
}

namespace {
std::string value_state(const char* value) { return value ? "value:" + std::string(value) : "unset"; }
std::string cwd_state() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? value_state(buf) : "unset";
}
}  // namespace

std::string stamp_now(const std::string& probe) {
  if (probe.rfind("env:", 0) == 0) return value_state(std::getenv(probe.c_str() + 4));
  if (probe == "cwd:") return cwd_state();
  struct ::stat st{};
  if (::stat(probe.c_str(), &st) != 0) return errno == ENOENT || errno == ENOTDIR ? "absent" : "special";
  return stamp_of(st, probe);
}

std::string probe_state(const std::string& probe) {
  // A header (what nearly every probe of a hit is) through the process's file memo, its one
  // stat: hashed once, a stat on every later lookup. What is not a plain file is stamped.
  bool path = probe.rfind("env:", 0) != 0 && probe != "cwd:";
  if (path && !special_path(probe))
    if (auto hash = memo_file_hash(probe); hash.ok()) return "file:" + hash->hex();
  std::string stamp = stamp_now(probe);
  return stamp.rfind("file:", 0) == 0 ? "unreadable" : stamp;  // a file it could not hash: never a recorded state
}

bool stamp_newer_than(std::string_view stamp, int64_t since_ns) {
  if (stamp.substr(0, 5) != "file:") return false;
  // file:dev:ino:size:mtime:ctime
  size_t at = 5;
  for (int i = 0; i < 3; ++i) at = stamp.find(':', at) + 1;
  int64_t mtime = 0, ctime = 0;
  auto colon = stamp.find(':', at);
  std::from_chars(stamp.data() + at, stamp.data() + colon, mtime);
  std::from_chars(stamp.data() + colon + 1, stamp.data() + stamp.size(), ctime);
  return mtime >= since_ns || ctime >= since_ns;
}

std::string artifact_key_text(std::string_view input_key_text, const std::vector<Probe>& probes) {
  std::vector<const Probe*> sorted;
  for (auto& p : probes) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(), [](const Probe* a, const Probe* b) { return a->path < b->path; });
  std::string out = "kiln-nvrtc-artifact-1\n";
  add_field(out, "input", xxh3_128(input_key_text).hex());
  for (auto* p : sorted) {
    add_field(out, "path", p->path);
    add_field(out, "state", p->state);
  }
  return out;
}

std::string encode_paths(const std::vector<std::string>& paths) {
  std::string out;
  for (auto& p : paths) put_field(out, p);
  return out;
}

std::optional<std::vector<std::string>> decode_paths(std::string_view bytes) {
  if (bytes.size() > k_max_paths_bytes) return std::nullopt;
  std::vector<std::string> paths;
  FieldReader in(bytes);
  while (!in.done()) {
    auto p = next(in);
    if (!p || p->empty() || paths.size() >= k_max_paths) return std::nullopt;
    paths.emplace_back(*p);
  }
  return paths;
}

bool paths_fit(const std::vector<std::string>& paths) {
  if (paths.size() > k_max_paths) return false;
  size_t bytes = 0;
  for (auto& p : paths) {
    if (p.empty()) return false;
    bytes += p.size() + 13;  // what put_field adds: at most 12 digits and a newline
  }
  return bytes <= k_max_paths_bytes;
}

std::string encode_manifests(const std::vector<std::vector<std::string>>& lists) {
  std::string out;
  for (auto& l : lists) put_field(out, encode_paths(l));
  return out;
}

std::optional<std::vector<std::vector<std::string>>> decode_manifests(std::string_view bytes) {
  if (bytes.size() > k_max_manifest_lists * (k_max_paths_bytes + 13)) return std::nullopt;
  std::vector<std::vector<std::string>> lists;
  FieldReader in(bytes);
  while (!in.done()) {
    auto list = next(in);
    if (!list || lists.size() >= k_max_manifest_lists) return std::nullopt;
    auto paths = decode_paths(*list);
    if (!paths) return std::nullopt;
    lists.push_back(std::move(*paths));
  }
  return lists;
}

std::vector<std::pair<std::string, std::string>> encode_result(const CompileResult& r) {
  std::string status;
  put_field(status, std::to_string(r.compile_code));
  put_field(status, std::to_string(r.pch_create_status));
  put_field(status, std::to_string(r.pch_heap_required_code));
  put_field(status, std::to_string(r.pch_heap_required));
  for (auto& [name, value] : r.outputs) {
    put_field(status, name);
    put_field(status, std::to_string(value.first));
  }
  std::string names;
  for (auto& [expr, value] : r.lowered_names) {
    put_field(names, expr);
    put_field(names, std::to_string(value.first));
    put_field(names, value.second);
  }
  std::vector<std::pair<std::string, std::string>> files{{"status", status}, {"names", names}};
  for (auto& [name, value] : r.outputs)
    if (value.first == 0) files.emplace_back(name, value.second);
  return files;
}

std::optional<CompileResult> decode_result(const std::map<std::string, std::string>& files) {
  auto status = files.find("status");
  auto names = files.find("names");
  if (status == files.end() || names == files.end()) return std::nullopt;
  CompileResult r;
  FieldReader in(status->second);
  auto code = number(in), pch = number(in), heap_code = number(in), heap = number(in);
  if (!code || !pch || !heap_code || !heap || *heap < 0) return std::nullopt;
  r.compile_code = static_cast<int>(*code);
  r.pch_create_status = static_cast<int>(*pch);
  r.pch_heap_required_code = static_cast<int>(*heap_code);
  r.pch_heap_required = static_cast<uint64_t>(*heap);
  while (!in.done()) {
    auto name = next(in);
    auto rc = number(in);
    if (!name || !rc) return std::nullopt;
    if (std::find(k_outputs.begin(), k_outputs.end(), *name) == k_outputs.end()) return std::nullopt;
    std::string bytes;
    if (*rc == 0) {
      auto f = files.find(std::string(*name));
      if (f == files.end()) return std::nullopt;
      bytes = f->second;
    }
    r.outputs[std::string(*name)] = {static_cast<int>(*rc), std::move(bytes)};
  }
  FieldReader n(names->second);
  while (!n.done()) {
    auto expr = next(n);
    auto rc = number(n);
    auto lowered = next(n);
    if (!expr || !rc || !lowered) return std::nullopt;
    r.lowered_names[std::string(*expr)] = {static_cast<int>(*rc), std::string(*lowered)};
  }
  return r;
}

}  // namespace kiln::nvrtc_preload
