#include "nvrtc_preload/program_key.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "support/file_memo.h"
#include "support/hash.h"

namespace kiln::nvrtc_preload {
namespace {

// NVRTC's options (CUDA 13's "Supported Compile Options") that read nothing outside the include
// search and write nothing: their value, if any, is keyed as written. Each row: the long
// spelling and the short one. An option given with "=value" or, for the one-letter forms (-I,
// -D, -U), with its value attached, matches its row.
constexpr std::array<std::pair<std::string_view, std::string_view>, 52> k_known_options{{
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
    {"--brief-diagnostics", "-brief-diag"}, {"--split-compile", "-split-compile"}, {"--fdevice-syntax-only", "-fdevice-syntax-only"},
    {"--minimal", "-minimal"}, {"--Werror", "-Werror"}, {"--Wreorder", "-Wreorder"}, {"--Wno-deprecated-declarations", "-Wno-deprecated-declarations"},
    {"--Wno-deprecated-gpu-targets", "-Wno-deprecated-gpu-targets"}, {"--gen-lto", "-gen-lto"}, {"--lto", "-lto"},
    {"--ptx", "-ptx"}, {"--fdevice-sanitize", "-fdevice-sanitize"},
}};
// Short forms whose value may follow without '=' ("-I/path", "-DNAME=1").
constexpr std::array<std::string_view, 3> k_attached{"-I", "-D", "-U"};

void add_field(std::string& out, std::string_view tag, std::string_view value) {
  out += tag;
  out += ' ';
  out += std::to_string(value.size());
  out += ':';
  out += value;
  out += '\n';
}

// "<n>:<bytes>" fields, read with every length checked against what is left.
class FieldReader {
 public:
  explicit FieldReader(std::string_view in) : m_in(in) {}
  bool done() const { return m_in.empty(); }
  std::optional<std::string_view> next() {
    auto colon = m_in.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon > 20) return std::nullopt;
    uint64_t n = 0;
    auto [end, ec] = std::from_chars(m_in.data(), m_in.data() + colon, n);
    if (ec != std::errc() || end != m_in.data() + colon || n > m_in.size() - colon - 1) return std::nullopt;
    std::string_view value = m_in.substr(colon + 1, n);
    m_in.remove_prefix(colon + 1 + n);
    return value;
  }
  std::optional<int64_t> number() {
    auto f = next();
    if (!f) return std::nullopt;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(f->data(), f->data() + f->size(), v);
    if (ec != std::errc() || end != f->data() + f->size()) return std::nullopt;
    return v;
  }

 private:
  std::string_view m_in;
};

void put(std::string& out, std::string_view value) {
  out += std::to_string(value.size());
  out += ':';
  out += value;
}

constexpr size_t k_max_paths = 65536;
constexpr size_t k_max_paths_bytes = size_t{1} << 20;
constexpr std::array<std::string_view, 6> k_outputs{"ptx", "cubin", "ltoir", "optixir", "tileir", "log"};

}  // namespace

std::string uncacheable_option(std::string_view option) {
  std::string_view name = option.substr(0, option.find('='));
  for (auto& [long_form, short_form] : k_known_options)
    if (name == long_form || name == short_form) return "";
  for (auto prefix : k_attached)
    if (option.size() > prefix.size() && option.substr(0, prefix.size()) == prefix) return "";
  if (name.find("pch") != std::string_view::npos) return "precompiled headers (" + std::string(name) + ")";
  return "option " + std::string(name.substr(0, 64));
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
  return out;
}

std::string probe_state(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return "absent";
  if (!S_ISREG(st.st_mode)) return "other";
  // Through the process's file memo: a header hashed once is a stat on every later lookup.
  auto hash = memo_file_hash(path);
  if (!hash.ok()) return "unreadable";  // never equal to a state a compile recorded as read
  return "file:" + hash->hex();
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
  for (auto& p : paths) put(out, p);
  return out;
}

std::optional<std::vector<std::string>> decode_paths(std::string_view bytes) {
  if (bytes.size() > k_max_paths_bytes) return std::nullopt;
  std::vector<std::string> paths;
  FieldReader in(bytes);
  while (!in.done()) {
    auto p = in.next();
    if (!p || p->empty() || paths.size() >= k_max_paths) return std::nullopt;
    paths.emplace_back(*p);
  }
  return paths;
}

std::vector<std::pair<std::string, std::string>> encode_result(const CompileResult& r) {
  std::string status;
  put(status, std::to_string(r.compile_code));
  put(status, std::to_string(r.pch_create_status));
  put(status, std::to_string(r.pch_heap_required_code));
  put(status, std::to_string(r.pch_heap_required));
  for (auto& [name, value] : r.outputs) {
    put(status, name);
    put(status, std::to_string(value.first));
  }
  std::string names;
  for (auto& [expr, value] : r.lowered_names) {
    put(names, expr);
    put(names, std::to_string(value.first));
    put(names, value.second);
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
  auto code = in.number(), pch = in.number(), heap_code = in.number(), heap = in.number();
  if (!code || !pch || !heap_code || !heap || *heap < 0) return std::nullopt;
  r.compile_code = static_cast<int>(*code);
  r.pch_create_status = static_cast<int>(*pch);
  r.pch_heap_required_code = static_cast<int>(*heap_code);
  r.pch_heap_required = static_cast<uint64_t>(*heap);
  while (!in.done()) {
    auto name = in.next();
    auto rc = in.number();
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
    auto expr = n.next();
    auto rc = n.number();
    auto lowered = n.next();
    if (!expr || !rc || !lowered) return std::nullopt;
    r.lowered_names[std::string(*expr)] = {static_cast<int>(*rc), std::string(*lowered)};
  }
  return r;
}

}  // namespace kiln::nvrtc_preload
