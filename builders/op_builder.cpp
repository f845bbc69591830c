#include "builders/op_builder.h"

#include <limits.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "cache/cache_key.h"
#include "cache/remote.h"
#include "jit/toolchain_loader.h"
#include "kiln/cpu_kernel.h"
#include "support/cuda_toolkit.h"
#include "support/install_paths.h"
#include "support/file_memo.h"
#include "support/file_util.h"

namespace kiln::builders {

std::string artifact_kind_for(const Target& target) {
  if (target.backend == "cuda") return "cuda-module";
  if (target.backend == "hip") return "hsaco";
  if (target.backend == "opencl") return "opencl-program";
  if (target.backend == "spirv") return "spirv";
  return "host-so";
}

// The headers in <...> a CUDA source includes that kiln's HIP path provides itself
// (backends/hip/include: the subsets of cooperative groups and CUB that kernels commonly use).
static bool hip_provides(std::string_view header) {
  return header == "cuda_bf16.h" || header == "cuda_runtime.h" || header == "cooperative_groups.h" ||
         header == "cooperative_groups/reduce.h" || header == "cub/block/block_reduce.cuh";
}

// The first header in <...> among `text`'s #includes that the HIP path cannot give it
// (a CUDA toolkit library such as Thrust), or empty.
static std::string header_hip_lacks(std::string_view text) {
  for (std::string_view header : jit::angled_includes(text))
    if (!hip_provides(header)) return std::string(header);
  return {};
}

Status is_compatible(const OpSpec& spec, const Target& target) {
  if (spec.library && target.backend != "cpu")
    return unavailable("library " + spec.name + " is a host library; it builds for cpu targets, not " + target.str());
  if (target.backend == "cpu") {
    if (spec.language != "cpp")
      return unavailable("op " + spec.name + " is written in " + spec.language + "; cpu targets build language cpp");
    return {};
  }
  if (target.backend == "cuda") {
    if (!spec.cuda) return unavailable("op " + spec.name + " has no CUDA version (no [cuda] table in " + spec.spec_path + ")");
    int sm = cuda_archs(target).front();  // the oldest GPU the artifact is for
    if (spec.cuda->min_sm > sm)
      return unavailable("op " + spec.name + " needs compute capability " + std::to_string(spec.cuda->min_sm) + " or newer; " +
                         target.str() + " is " + std::to_string(sm));
    return {};
  }
  if (target.backend == "hip") {
    if (!spec.cuda) return unavailable("op " + spec.name + " has no CUDA version to compile for AMD GPUs (no [cuda] table in " + spec.spec_path + ")");
    for (auto& s : spec.cuda->sources) {
      std::string text;
      if (s.inline_text) {
        text = *s.inline_text;
      } else if (auto read = read_file(s.path); read.ok()) {
        text = std::move(read).value();
      }
      if (std::string lacking = header_hip_lacks(text); !lacking.empty())
        return unavailable("op " + spec.name + ": " + s.rel_path + " includes <" + lacking +
                           ">, a CUDA toolkit header with no counterpart in kiln's HIP headers (backends/hip/include: the CUDA language, cuda_bf16.h, "
                           "and the parts of cooperative groups and CUB kernels commonly use)");
    }
    return {};
  }
  if (target.backend == "opencl" || target.backend == "spirv") {
    if (!spec.opencl) return unavailable("op " + spec.name + " has no OpenCL version (no [opencl] table in " + spec.spec_path + ")");
    return {};
  }
  return unavailable("op " + spec.name + ": no toolchain builds for " + target.str());
}

std::string cpu_device_include_dir() {
  if (const char* env = std::getenv("KILN_CPU_INCLUDE_DIR"); env && *env) return absolute_path(env);
  // Installed: the kernel ABI headers under share/kiln (support/install_paths.h).
  if (const std::string& data = installed_data_dir(); !data.empty()) return data + "/include/cpu";
  return KILN_CPU_DEVICE_INCLUDE_DIR;
}

std::string cuda_device_include_dir() {
  if (const char* env = std::getenv("KILN_CUDA_INCLUDE_DIR"); env && *env) return absolute_path(env);
  if (const std::string& data = installed_data_dir(); !data.empty()) return data + "/include/cuda";
  return KILN_CUDA_DEVICE_INCLUDE_DIR;
}

std::string hip_device_include_dir() {
  if (const char* env = std::getenv("KILN_HIP_INCLUDE_DIR"); env && *env) return absolute_path(env);
  if (const std::string& data = installed_data_dir(); !data.empty()) return data + "/include/hip";
  return KILN_HIP_DEVICE_INCLUDE_DIR;
}

// NVRTC's options as Clang's, for CUDA sources compiled for AMD GPUs: those with a meaning
// there are translated, the rest (register limits, line info) have none and are dropped.
static std::vector<std::string> hip_flags_from_nvrtc(const std::vector<std::string>& nvrtc) {
  std::vector<std::string> out;
  for (auto& f : nvrtc) {
    if (f == "--use_fast_math" || f == "-use_fast_math") out.push_back("-ffast-math");
    else if (f == "--fmad=false") out.push_back("-ffp-contract=off");
  }
  return out;
}

std::string hip_toolchain_for() {
  const char* env = std::getenv("KILN_HIP_TOOLCHAIN");
  return env && std::string(env) == "hiprtc" ? "hiprtc" : "clang";
}

bool is_heavy_cuda_header(std::string_view header) {
  // NVRTC 13.0 compiling a one-line kernel that includes the header (best of 3, this machine,
  // 2026-11-25): cub/block/block_reduce.cuh 1065 ms, cooperative_groups/reduce.h 920,
  // cooperative_groups.h 762, thrust/functional.h 751, cuda/std/atomic 729; against
  // cuda_fp16.h 28, cuda_bf16.h 32, cuda_pipeline.h 34, mma.h 54, no header 22. Through Clang
  // with their PCH stored, reduce_sum (CUB) and layer_norm (cooperative groups) compile to a
  // cubin in 48 and 130 ms where NVRTC takes 374 and 310 (tools/bench/compare, resident). A
  // cuda_bf16.h kernel gains 10-30 ms there (gelu 26 ms, NVRTC 55), but its first compile on a
  // node would parse Clang's CUDA wrapper headers for ~1 s to make the PCH, where NVRTC takes
  // 30 ms: not worth it. A light libcu++ header (cuda/std/cstdint, 31 ms) goes with its library.
  for (std::string_view library : {"cub/", "thrust/", "cuda/", "nv/", "cooperative_groups"})
    if (header.substr(0, library.size()) == library) return true;
  return false;
}

static std::string cuda_route_asked(const OpSpec& spec) {
  std::string asked = spec.cuda ? spec.cuda->toolchain : "auto";
  if (const char* env = std::getenv("KILN_CUDA_TOOLCHAIN");
      env && (std::string(env) == "auto" || std::string(env) == "clang" || std::string(env) == "nvrtc"))
    asked = env;
  return asked;
}

bool cuda_route_is_auto(const OpSpec& spec) { return cuda_route_asked(spec) == "auto"; }

std::string cuda_toolchain_for(const OpSpec& spec, const std::vector<jit::SourceFile>& sources) {
  std::string asked = cuda_route_asked(spec);
  if (asked != "auto") return asked;
  for (auto& source : sources)
    for (std::string_view header : jit::angled_includes(source.text))
      if (is_heavy_cuda_header(header)) return jit::clang_toolchain_present() ? "clang" : "nvrtc";
  return "nvrtc";
}

static std::string entry_source_name(const OpSpec& spec) { return ".kiln-entry-" + spec.name + ".cpp"; }

// The extern "C" entry kiln_entry_<symbol> that unpacks the arguments and calls `callee`: a
// function it declares first, or (`declare` false) a template instance visible where the
// wrapper is placed.
static void append_wrapper(std::string& out, const std::string& callee, const std::string& symbol,
                           const std::vector<ParamSpec>& params, bool takes_block, bool declare = true) {
  std::string declaration, call;
  if (takes_block) {
    declaration = "const kiln::cpu::Block&";
    call = "*b";
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (takes_block || i > 0) {
      declaration += ", ";
      call += ", ";
    }
    declaration += params[i].type;
    call += "*static_cast<" + params[i].type + "*>(a[" + std::to_string(i) + "])";
  }
  if (declare) out += "__attribute__((visibility(\"hidden\"))) void " + callee + "(" + declaration + ");\n";
  out += "extern \"C\" __attribute__((visibility(\"default\"))) void " KILN_CPU_ENTRY_PREFIX + symbol +
         "(const kiln_cpu_block* b, void* const* a) {\n";
  if (!takes_block) out += "  (void)b;\n";
  out += "  " + callee + "(" + call + ");\n}\n";
}

std::string generate_cpu_entry_source(const OpSpec& spec) {
  std::string out =
      "// Generated by kiln for op " + spec.name +
      ": extern \"C\" entry points that unpack launch arguments.\n"
      "// A kernel declared here but not defined with exactly these parameter types in the op's\n"
      "// sources is an 'undefined hidden symbol' at link time.\n"
      "#include <kiln/cpu_kernel.h>\n"
      "extern \"C\" __attribute__((visibility(\"default\"))) const int kiln_cpu_abi_version = KILN_CPU_ABI_VERSION;\n";
  for (const auto& e : spec.entries)  // templated entries: see templated_cpu_entries
    if (e.instance_for("cpu").empty()) append_wrapper(out, e.name, e.name, e.params, true);
  if (spec.check) {
    const EntryPoint* checked = spec.find_entry(spec.check->entry);
    append_wrapper(out, spec.check->reference, spec.check->reference, checked->params, false);
  }
  return out;
}

// Entries that are template instances get their wrappers at the end of the op's first source,
// where the template is visible (defined there or in a header it includes); a #line names them
// in diagnostics.
static std::string templated_cpu_entries(const OpSpec& spec) {
  std::string out;
  for (const auto& e : spec.entries)
    if (const std::string& instance = e.instance_for("cpu"); !instance.empty()) {
      if (out.empty()) out = "\n#line 1 \"kiln: entry points of op " + spec.name + " (generated)\"\n";
      append_wrapper(out, instance, e.name, e.params, true, /*declare=*/false);
    }
  return out;
}

static std::vector<runtime::KernelSignature> signatures_of(const OpSpec& spec) {
  std::vector<runtime::KernelSignature> out;
  auto sig = [](const std::string& name, const std::vector<ParamSpec>& params) {
    runtime::KernelSignature s{name, {}, ""};
    for (auto& p : params) s.param_sizes.push_back(p.size);
    return s;
  };
  for (auto& e : spec.entries) out.push_back(sig(e.name, e.params));
  if (spec.check) out.push_back(sig(spec.check->reference, spec.find_entry(spec.check->entry)->params));
  return out;
}

Result<BuildRequest> make_build_request(const OpSpec& spec, const Target& asked) {
  KILN_RETURN_IF_ERROR(is_compatible(spec, asked));
  BuildRequest r;
  r.spec = &spec;
  // An artifact never claims less than it needs: instruction-set flags raise a cpu level.
  Target target = asked.backend == "cpu" ? effective_target(spec.flags, asked) : asked;
  if (!(target == asked))
    r.notes.push_back("op " + spec.name + " is built for " + target.str() + ", not " + asked.str() +
                      ": its flags use instructions of that level");
  r.target = target;
  r.compile.target = target.str();
  r.compile.label = "op " + spec.name;
  const std::string& backend = target.backend;
  bool cuda = backend == "cuda", hip = backend == "hip", opencl = backend == "opencl" || backend == "spirv";
  r.compile.language = cuda ? "cuda" : hip ? "hip" : opencl ? "opencl" : spec.language;
  for (const auto& s : cuda || hip ? spec.cuda->sources : opencl ? spec.opencl->sources : spec.sources) {
    jit::SourceFile f{s.path, ""};
    if (s.inline_text) {
      f.text = *s.inline_text;
    } else {
      auto text = read_file(s.path);
      if (!text.ok()) return spec_error(s.pos, "cannot read source: " + text.status().message());
      f.text = std::move(text).value();
    }
    r.compile.sources.push_back(std::move(f));
  }
  r.compile.include_dirs = spec.include_dirs;
  r.compile.defines = spec.defines;
  if (spec.library) {
    // A host library: the options are all its user's, and nothing is launched through kiln.
    r.compile.host_library = true;
    r.compile.flags = spec.flags;
    r.compile.prelude = spec.library->prelude;
    r.compile.unit_defines = spec.library->unit_defines;
    r.compile.link_flags = spec.library->link_flags;
    r.compile.cuda_flags = spec.library->cuda_flags;
    r.compile.cuda_archs = spec.library->cuda_archs;
    return r;
  }
  r.kernels = signatures_of(spec);
  if (hip || opencl) {
    // Kernels named as the entries (templated ones through the [cuda] name expressions); the
    // check's reference runs on the host from the cpu artifact.
    const auto& defines = hip ? spec.cuda->defines : spec.opencl->defines;
    r.compile.defines.insert(r.compile.defines.end(), defines.begin(), defines.end());
    r.compile.flags = hip ? hip_flags_from_nvrtc(spec.cuda->flags) : spec.opencl->flags;
    if (hip) {
      for (auto& e : spec.entries)
        if (!e.instance_for("hip").empty()) r.compile.name_expressions.push_back(e.instance_for("hip"));
      r.compile.include_dirs.push_back(hip_device_include_dir());
    }
    if (spec.check) r.kernels.pop_back();
    return r;
  }
  if (cuda) {
    // CUDA kernels are extern "C" __global__ functions named as the entries: no generated
    // entry TU, and the check's reference runs on the host from the cpu artifact.
    r.compile.defines.insert(r.compile.defines.end(), spec.cuda->defines.begin(), spec.cuda->defines.end());
    r.compile.flags = spec.cuda->flags;
    for (auto& e : spec.entries)
      if (!e.instance_for("cuda").empty()) r.compile.name_expressions.push_back(e.instance_for("cuda"));
    r.cuda_route_auto = cuda_route_is_auto(spec);
    use_cuda_toolchain(r, cuda_toolchain_for(spec, r.compile.sources));
    if (spec.check) r.kernels.pop_back();
    return r;
  }
  r.compile.sources.front().text += templated_cpu_entries(spec);
  r.compile.sources.push_back({spec.spec_dir + "/" + entry_source_name(spec), generate_cpu_entry_source(spec)});
  r.compile.include_dirs.push_back(cpu_device_include_dir());
  r.compile.flags = spec.flags;
  return r;
}

void use_cuda_toolchain(BuildRequest& r, const std::string& toolchain) {
  const std::string prelude_dir = cuda_device_include_dir();
  if (r.cuda_toolchain == "clang" && !r.compile.cuda_toolkit_headers && !r.compile.include_dirs.empty() &&
      r.compile.include_dirs.back() == prelude_dir)
    r.compile.include_dirs.pop_back();
  r.cuda_toolchain = toolchain;
  r.compile.cuda_toolkit_headers = false;
  if (toolchain != "clang") return;
  // Kiln's prelude for self-contained kernels (a few ms); the CUDA toolkit's headers, through
  // Clang's wrapper headers, for a kernel that includes any header in <...>.
  for (auto& src : r.compile.sources) r.compile.cuda_toolkit_headers = r.compile.cuda_toolkit_headers || jit::has_angled_include(src.text);
  if (!r.compile.cuda_toolkit_headers) r.compile.include_dirs.push_back(prelude_dir);
}

std::string label_for(const std::string& abs_path, const OpSpec& spec) {
  std::string kiln_dir = cpu_device_include_dir(), kiln_cuda_dir = cuda_device_include_dir(), kiln_hip_dir = hip_device_include_dir();
  if (path_is_within(abs_path, spec.spec_dir)) return "spec:" + relative_to(abs_path, spec.spec_dir);
  if (path_is_within(abs_path, kiln_dir)) return "kiln:" + relative_to(abs_path, kiln_dir);
  if (path_is_within(abs_path, kiln_cuda_dir)) return "kiln-cuda:" + relative_to(abs_path, kiln_cuda_dir);
  if (path_is_within(abs_path, kiln_hip_dir)) return "kiln-hip:" + relative_to(abs_path, kiln_hip_dir);
  return abs_path;
}

std::string path_for(const std::string& label, const OpSpec& spec) {
  if (label.rfind("spec:", 0) == 0) return spec.spec_dir + "/" + label.substr(5);
  if (label.rfind("kiln:", 0) == 0) return cpu_device_include_dir() + "/" + label.substr(5);
  if (label.rfind("kiln-cuda:", 0) == 0) return cuda_device_include_dir() + "/" + label.substr(10);
  if (label.rfind("kiln-hip:", 0) == 0) return hip_device_include_dir() + "/" + label.substr(9);
  return label;
}

namespace {

// ---- Bounds on a manifest, checked before it is decoded or any header it names is read.
using cache::k_max_manifest_bytes;  // the largest manifest text (remote.h)
// The longest label: a path the system could open at all.
constexpr size_t k_max_label_bytes = PATH_MAX;
// The largest header a manifest from elsewhere may name. The largest headers on the development
// machine: LLVM's DemangleTestCases.inc, 5.2 MB; the CUDA toolkit's and torch's, under 2 MB.
constexpr int64_t k_max_header_bytes = int64_t{64} << 20;

// True when `path` has no empty, "." or ".." component (and is absolute, or relative, as asked):
// what the kernel opens is then what the folder checks saw, whatever symlinks lie on the way.
bool plain_path(std::string_view path, bool absolute) {
  if (path.empty() || (path[0] == '/') != absolute) return false;
  if (absolute) path.remove_prefix(1);
  while (true) {
    size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    path.remove_prefix(slash + 1);
  }
}

// The folders named by the include options among `flags` (-I, -isystem, -iquote, -idirafter,
// as "-I DIR" or "-IDIR").
void include_dirs_in_flags(const std::vector<std::string>& flags, std::vector<std::string>& out) {
  static const std::string_view k_options[] = {"-isystem", "-idirafter", "-iquote", "-I"};
  for (size_t i = 0; i < flags.size(); ++i) {
    for (std::string_view o : k_options) {
      if (flags[i].rfind(o, 0) != 0) continue;
      if (flags[i].size() > o.size()) out.push_back(flags[i].substr(o.size()));
      else if (i + 1 < flags.size()) out.push_back(flags[i + 1]);
      break;
    }
  }
}

}  // namespace

std::vector<std::string> header_roots(const OpSpec& spec) {
  std::vector<std::string> roots = {spec.spec_dir, cpu_device_include_dir(), cuda_device_include_dir(), hip_device_include_dir()};
  roots.insert(roots.end(), spec.include_dirs.begin(), spec.include_dirs.end());
  for (auto& s : spec.sources) roots.push_back(dirname_of(s.path));  // "..." beside a library's source
  include_dirs_in_flags(spec.flags, roots);
  if (spec.library) include_dirs_in_flags(spec.library->cuda_flags, roots);
  // A prelude named by its path (kiln.torch.inductor's OpenMP bridge, beside kiln's Python
  // package) is read from its folder; one named as <torch/extension.h> is found through -I.
  if (spec.library)
    for (auto& p : spec.library->prelude)
      if (!p.empty() && p[0] == '/') roots.push_back(dirname_of(p));
  // The compiler's own: its resource headers, the C library's and GCC's (libstdc++), CUDA's.
  if (std::string resource = jit::clang_resource_dir(); !resource.empty()) roots.push_back(resource);
  for (const char* dir : {"/usr/include", "/usr/local/include", "/usr/lib/gcc", "/usr/lib64/gcc"}) roots.push_back(dir);
  for (auto& toolkit : cuda_toolkit_roots()) {
    roots.push_back(toolkit);
    char real[PATH_MAX];  // NVRTC's headers are found through the library's real folder
    if (::realpath(toolkit.c_str(), real)) roots.push_back(real);
  }
  // The search paths the driver takes from the environment (their values are in the input key).
  for (const char* var : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"}) {
    std::string_view list = std::getenv(var) ? std::getenv(var) : "";
    for (size_t at = 0; at <= list.size();) {
      size_t colon = std::min(list.find(':', at), list.size());
      if (colon > at) roots.emplace_back(list.substr(at, colon - at));
      at = colon + 1;
    }
  }
  std::vector<std::string> out;
  for (auto& r : roots)
    if (!r.empty()) out.push_back(absolute_path(r));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Status check_manifest_headers(const std::vector<ManifestEntry>& manifest, const OpSpec& spec) {
  return check_manifest_labels(manifest, {"spec:", "kiln:", "kiln-cuda:", "kiln-hip:"}, header_roots(spec),
                               [&spec](const std::string& label) { return path_for(label, spec); }, "a compile of " + spec.name);
}

Status check_manifest_labels(const std::vector<ManifestEntry>& manifest, const std::vector<std::string_view>& relative_prefixes,
                             const std::vector<std::string>& roots, const std::function<std::string(const std::string&)>& path_of,
                             const std::string& reader) {
  for (auto& e : manifest) {
    auto refuse = [&](const std::string& why) { return Status(StatusCode::kDataLoss, "the manifest's header '" + e.label + "' " + why); };
    std::string_view label = e.label;
    bool relative = false;
    for (std::string_view prefix : relative_prefixes)
      if (label.substr(0, prefix.size()) == prefix) {
        label.remove_prefix(prefix.size());
        relative = true;
        break;
      }
    if (!plain_path(label, !relative)) return refuse("is not a plain path (empty, . or .. parts, or not where its kind says)");
    std::string path = path_of(e.label);
    if (std::none_of(roots.begin(), roots.end(), [&](const std::string& root) { return path_is_within(path, root); }))
      return refuse("is outside the folders " + reader + " reads headers from");
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) continue;  // not here: a rehash says it is gone (a miss)
    if (!S_ISREG(st.st_mode)) return refuse("is not a regular file");
    if (st.st_size > k_max_header_bytes)
      return refuse("is " + std::to_string(st.st_size) + " bytes, more than a header may be (" + std::to_string(k_max_header_bytes) + ")");
  }
  return {};
}

const std::vector<std::string>& environment_in_key() {
  // Read by Clang's driver (include search, option overrides, tool lookup) or by kiln's
  // own compile setup. KILN_CPU_LEVEL is not here: it changes the target, which is.
  // KILN_CUDA_SPLIT_DEVICE=0 links a CUDA device pass's cubin from one part instead of four
  // (jit/clang/split_device.h): the same kernels, other bytes.
  static const std::vector<std::string> k_vars = {
      "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "OBJCPLUS_INCLUDE_PATH",
      "CCC_OVERRIDE_OPTIONS", "COMPILER_PATH", "GCC_EXEC_PREFIX", "SOURCE_DATE_EPOCH", "KILN_CPU_INCLUDE_DIR",
      "KILN_CUDA_SPLIT_DEVICE"};
  return k_vars;
}

KeyParts input_key(const BuildRequest& r, const std::string& toolchain_identity, bool with_components) {
  const OpSpec& spec = *r.spec;
  cache::KeyBuilder k("input", with_components);
  k.add("toolchain", toolchain_identity);
  for (auto& var : environment_in_key())
    if (const char* v = std::getenv(var.c_str())) k.add("env:" + var, v);
  k.add("target", r.target.str());
  k.add("language", r.compile.language);
  if (r.compile.cuda_toolkit_headers) k.add("cuda-headers", "toolkit");
  // Options the toolchain adds itself (-O3, -std=c++20, -fPIC) are part of its identity: the
  // library that adds them is fingerprinted.
  for (auto& d : r.compile.include_dirs) k.add("include-dir", label_for(d, spec));
  for (auto& d : r.compile.defines) k.add("define", d);
  for (auto& f : r.compile.flags) k.add("flag", f);
  for (auto& sig : r.kernels) {
    k.add("kernel", sig.name);
    for (auto size : sig.param_sizes) k.add("param-size", std::to_string(size));
  }
  for (auto& e : spec.entries) {
    for (auto& p : e.params) k.add("param", e.name + "." + p.name + ":" + p.type);
    if (const std::string& instance = e.instance_for(r.target.backend); !instance.empty())
      k.add("name-expression", e.name + "=" + instance);
  }
  if (r.compile.host_library) {
    k.add("library", "host");
    for (auto& h : r.compile.prelude) k.add("prelude", h);
    for (auto& d : r.compile.unit_defines) k.add("unit-define", d);
    for (auto& f : r.compile.link_flags) k.add("link-flag", f);
    // Only a library with CUDA sources has CUDA options in its key (keys of C++ ones unchanged).
    if (jit::has_cuda_sources(r.compile)) {
      for (auto& f : r.compile.cuda_flags) k.add("cuda-flag", f);
      for (auto& a : r.compile.cuda_archs) k.add("cuda-arch", a);
    }
    for (auto& [name, value] : spec.library->facts) k.add("fact:" + name, value);
  }
  for (size_t i = 0; i < r.compile.sources.size(); ++i) {
    std::string label = label_for(r.compile.sources[i].path, spec);
    k.add("source", label);
    k.add("source-text:" + label, r.compile.sources[i].text);
  }
  return {k.finish(), k.components()};
}

std::string encode_manifest(const std::vector<ManifestEntry>& entries) {
  std::string out;
  for (auto& e : entries) out += e.label + "\t" + e.hash.hex() + "\n";
  return out;
}

Result<std::vector<ManifestEntry>> decode_manifest(std::string_view text) {
  if (text.size() > k_max_manifest_bytes)
    return Status(StatusCode::kDataLoss, "a manifest of " + std::to_string(text.size()) + " bytes (at most " + std::to_string(k_max_manifest_bytes) + ")");
  std::vector<ManifestEntry> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return Status(StatusCode::kDataLoss, "manifest line " + std::to_string(line_no) + " is not terminated");
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    size_t tab = line.rfind('\t');
    if (tab == std::string_view::npos || tab == 0)
      return Status(StatusCode::kDataLoss, "manifest line " + std::to_string(line_no) + " has no label and hash");
    if (tab > k_max_label_bytes) return Status(StatusCode::kDataLoss, "manifest line " + std::to_string(line_no) + " has a label past PATH_MAX");
    auto hash = Hash128::from_hex(line.substr(tab + 1));
    if (!hash) return Status(StatusCode::kDataLoss, "manifest line " + std::to_string(line_no) + " has a bad hash");
    out.push_back({std::string(line.substr(0, tab)), *hash});
  }
  return out;
}

std::optional<std::vector<ManifestEntry>> rehash_manifest(const std::vector<ManifestEntry>& manifest, const OpSpec& spec) {
  return rehash_manifest(manifest, [&spec](const std::string& label) { return path_for(label, spec); });
}

std::optional<std::vector<ManifestEntry>> rehash_manifest(const std::vector<ManifestEntry>& manifest,
                                                          const std::function<std::string(const std::string&)>& path_of) {
  std::vector<std::string> paths;
  paths.reserve(manifest.size());
  for (auto& e : manifest) paths.push_back(path_of(e.label));
  auto hashes = memo_files_hash(paths);  // one pass, each folder opened once
  if (!hashes.ok()) return std::nullopt;
  std::vector<ManifestEntry> out;
  out.reserve(manifest.size());
  for (size_t i = 0; i < manifest.size(); ++i) out.push_back({manifest[i].label, hashes.value()[i]});
  return out;
}

Result<std::vector<ManifestEntry>> manifest_from_dependencies(const std::vector<std::string>& deps, const BuildRequest& r) {
  std::set<std::string> sources;
  for (auto& s : r.compile.sources) sources.insert(s.path);
  std::set<std::string> seen;
  std::vector<ManifestEntry> out;
  for (auto& dep : deps) {
    std::string abs = absolute_path(dep);
    if (sources.count(abs) || !seen.insert(abs).second) continue;
    auto hash = memo_file_hash(abs);
    if (!hash.ok()) return Status(StatusCode::kIoError, "cannot hash header " + abs + " that the compiler read: " + hash.status().message());
    out.push_back({label_for(abs, *r.spec), hash.value()});
  }
  // Sorted, so the key does not depend on the order the compiler happened to read them in.
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.label < b.label; });
  return out;
}

std::vector<ManifestEntry> merge_manifests(std::vector<ManifestEntry> a, const std::vector<ManifestEntry>& b) {
  std::set<std::string> labels;
  for (auto& e : a) labels.insert(e.label);
  for (auto& e : b)
    if (labels.insert(e.label).second) a.push_back(e);
  std::sort(a.begin(), a.end(), [](auto& x, auto& y) { return x.label < y.label; });
  return a;
}

KeyParts artifact_key(const KeyParts& input, const std::vector<ManifestEntry>& headers) {
  cache::KeyBuilder k("artifact");  // its own components are not kept: the input's plus the headers are
  k.add("input", input.key);
  for (auto& h : headers) {
    k.add("header", h.label);
    k.add("header-content:" + h.label, h.hash);
  }
  KeyParts out{k.finish(), input.components};
  if (!input.components.empty())
    for (auto& h : headers) out.components.emplace_back("header-content:" + h.label, h.hash.hex());
  return out;
}

static std::string escape_field(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out;
}

static std::string unescape_field(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char n = s[++i];
      out += n == 'n' ? '\n' : n == 't' ? '\t' : n;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string encode_diagnostics(const std::vector<jit::Diagnostic>& diagnostics) {
  std::string out;
  for (auto& d : diagnostics)
    out += std::to_string(static_cast<int>(d.severity)) + "\t" + escape_field(d.file) + "\t" + std::to_string(d.line) +
           "\t" + std::to_string(d.column) + "\t" + escape_field(d.message) + "\n";
  return out;
}

Result<std::vector<jit::Diagnostic>> decode_diagnostics(std::string_view text) {
  std::vector<jit::Diagnostic> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return Status(StatusCode::kDataLoss, "unterminated diagnostic in the cache");
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    std::vector<std::string_view> f;
    size_t start = 0;
    for (size_t i = 0; i <= line.size(); ++i)
      if (i == line.size() || line[i] == '\t') {
        f.push_back(line.substr(start, i - start));
        start = i + 1;
      }
    if (f.size() != 5) return Status(StatusCode::kDataLoss, "malformed diagnostic in the cache");
    jit::Diagnostic d;
    int sev = std::atoi(std::string(f[0]).c_str());
    if (sev < 0 || sev > 3) return Status(StatusCode::kDataLoss, "bad diagnostic severity in the cache");
    d.severity = static_cast<jit::Diagnostic::Severity>(sev);
    d.file = unescape_field(f[1]);
    d.line = static_cast<unsigned>(std::strtoul(std::string(f[2]).c_str(), nullptr, 10));
    d.column = static_cast<unsigned>(std::strtoul(std::string(f[3]).c_str(), nullptr, 10));
    d.message = unescape_field(f[4]);
    out.push_back(std::move(d));
  }
  return out;
}

std::string encode_kernels(const std::vector<runtime::KernelSignature>& kernels) {
  std::string out;
  for (auto& k : kernels) {
    if (!out.empty()) out += ";";
    out += k.name + (k.symbol.empty() ? "" : "=" + k.symbol) + ":";
    for (size_t i = 0; i < k.param_sizes.size(); ++i) out += (i ? "," : "") + std::to_string(k.param_sizes[i]);
  }
  return out;
}

Result<std::vector<runtime::KernelSignature>> decode_kernels(std::string_view text) {
  std::vector<runtime::KernelSignature> out;
  while (!text.empty()) {
    size_t end = text.find(';');
    std::string_view item = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    size_t colon = item.find(':');
    if (colon == std::string_view::npos || colon == 0) return Status(StatusCode::kDataLoss, "bad kernel list in artifact metadata");
    std::string_view names = item.substr(0, colon);  // "name" or "name=symbol"
    size_t eq = names.find('=');
    runtime::KernelSignature sig{std::string(names.substr(0, eq)), {}, ""};
    if (eq != std::string_view::npos) sig.symbol = std::string(names.substr(eq + 1));
    std::string_view sizes = item.substr(colon + 1);
    while (!sizes.empty()) {
      size_t comma = sizes.find(',');
      std::string num(sizes.substr(0, comma));
      sizes = comma == std::string_view::npos ? std::string_view() : sizes.substr(comma + 1);
      char* endp = nullptr;
      unsigned long v = std::strtoul(num.c_str(), &endp, 10);
      if (num.empty() || *endp || v == 0 || v > 256) return Status(StatusCode::kDataLoss, "bad parameter size in artifact metadata");
      sig.param_sizes.push_back(static_cast<uint32_t>(v));
    }
    out.push_back(std::move(sig));
  }
  return out;
}

}  // namespace kiln::builders
