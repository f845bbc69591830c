// NVRTC's C API as libkiln_nvrtc.so exports it: each call forwards to the real NVRTC
// (real_nvrtc.h), and nvrtcCompileProgram goes through kiln's store first.
//
// A program's handle is the real NVRTC's own (callers may hand it to anything that takes one);
// what kiln knows of it lives in a table beside it. A hit leaves the real program uncompiled and
// answers every getter from what the compile that made it recorded: each output and its size,
// the log, the lowered names and the PCH status, with the return codes the real NVRTC gave.
//
// KILN_NVRTC_LOG=stderr (or a file to append to) writes a line per compile: hit, miss, or not
// cached and why. KILN_NVRTC_DISABLE=1 forwards everything untouched.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "nvrtc_preload/program_key.h"
#include "nvrtc_preload/real_nvrtc.h"
#include "nvrtc_preload/store_bridge.h"

namespace kiln::nvrtc_preload {
namespace {

// nvrtcResult values this file returns itself.
constexpr int k_invalid_input = 3;
constexpr int k_no_name_expressions_after_compilation = 8;
constexpr int k_name_expression_not_valid = 10;
constexpr int k_internal_error = 11;

struct Program {
  ProgramInput input;
  std::string unkeyable;  // set: its compiles pass through, this says why
  std::optional<CompileResult> served;  // set by a hit: the getters answer from it
};

std::mutex g_programs_mutex;
std::unordered_map<void*, std::shared_ptr<Program>> g_programs;

std::shared_ptr<Program> program_of(void* handle) {
  std::lock_guard lock(g_programs_mutex);
  auto it = g_programs.find(handle);
  return it == g_programs.end() ? nullptr : it->second;
}

// ---- The log a user asks for (KILN_NVRTC_LOG).
void say(const std::string& line) {
  static const char* where = std::getenv("KILN_NVRTC_LOG");
  if (!where || !*where) return;
  std::string text = "kiln nvrtc: " + line + "\n";
  if (std::strcmp(where, "stderr") == 0) {
    (void)!::write(2, text.data(), text.size());
    return;
  }
  int fd = ::open(where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, text.data(), text.size());  // O_APPEND: one line stays whole
  ::close(fd);
}

// No real NVRTC: every call fails, so the reason goes to stderr (once) whatever KILN_NVRTC_LOG says.
const RealNvrtc* real_or_log() {
  std::string error;
  const RealNvrtc* real = real_nvrtc(&error);
  if (!real) {
    static std::once_flag once;
    std::call_once(once, [&] {
      std::string text = "kiln nvrtc: " + error + "\n";
      (void)!::write(2, text.data(), text.size());
    });
  }
  return real;
}

// ---- The store side (store_bridge.h), loaded beside this library on the first compile.
struct Bridge {
  KilnNvrtcLookup lookup = nullptr;
  KilnNvrtcKeep keep = nullptr;
  KilnNvrtcDrop drop = nullptr;
  KilnNvrtcCount count = nullptr;
};
const Bridge* bridge() {
  static std::once_flag once;
  static Bridge* loaded = nullptr;
  std::call_once(once, [] {
    Dl_info self{};
    if (!::dladdr(reinterpret_cast<void*>(&bridge), &self) || !self.dli_fname) return;
    std::string path = self.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + "libkiln_nvrtc_store.so";
    if (const char* p = std::getenv("KILN_NVRTC_STORE_LIBRARY"); p && *p) path = p;
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = ::dlerror();
      say("kiln's store cannot be loaded (" + std::string(why ? why : path) + "): compiling without it");
      return;
    }
    auto* b = new Bridge;
    b->lookup = reinterpret_cast<KilnNvrtcLookup>(::dlsym(handle, "kiln_nvrtc_store_lookup"));
    b->keep = reinterpret_cast<KilnNvrtcKeep>(::dlsym(handle, "kiln_nvrtc_store_keep"));
    b->drop = reinterpret_cast<KilnNvrtcDrop>(::dlsym(handle, "kiln_nvrtc_store_drop"));
    b->count = reinterpret_cast<KilnNvrtcCount>(::dlsym(handle, "kiln_nvrtc_store_count"));
    if (!b->lookup || !b->keep || !b->drop || !b->count) {
      say(path + " lacks kiln_nvrtc_store_*: compiling without it");
      delete b;
      return;
    }
    loaded = b;
  });
  return loaded;
}

void put_into_map(void* context, const char* name, const char* data, size_t size) {
  (*static_cast<std::map<std::string, std::string>*>(context))[name].assign(data, size);
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// What the real NVRTC answers for a compiled program, every getter asked once.
CompileResult collect(const RealNvrtc& real, void* handle, int code, const Program& program) {
  CompileResult r;
  r.compile_code = code;
  using SizeFn = int (*)(void*, size_t*);
  using GetFn = int (*)(void*, char*);
  const std::pair<const char*, std::pair<SizeFn, GetFn>> getters[] = {
      {"ptx", {real.nvrtcGetPTXSize, real.nvrtcGetPTX}},
      {"cubin", {real.nvrtcGetCUBINSize, real.nvrtcGetCUBIN}},
      {"ltoir", {real.nvrtcGetLTOIRSize, real.nvrtcGetLTOIR}},
      {"optixir", {real.nvrtcGetOptiXIRSize, real.nvrtcGetOptiXIR}},
      {"tileir", {real.nvrtcGetTileIRSize, real.nvrtcGetTileIR}},
      {"log", {real.nvrtcGetProgramLogSize, real.nvrtcGetProgramLog}},
  };
  for (auto& [name, fns] : getters) {
    if (!fns.first || !fns.second) continue;  // this NVRTC has no such output
    size_t size = 0;
    int rc = fns.first(handle, &size);
    std::string bytes;
    if (rc == 0) {
      bytes.resize(size);
      if (size) rc = fns.second(handle, bytes.data());
    }
    r.outputs[name] = {rc, rc == 0 ? std::move(bytes) : std::string()};
  }
  for (auto& expr : program.input.name_expressions) {
    const char* lowered = nullptr;
    int rc = real.nvrtcGetLoweredName ? real.nvrtcGetLoweredName(handle, expr.c_str(), &lowered) : k_internal_error;
    r.lowered_names[expr] = {rc, rc == 0 && lowered ? lowered : ""};
  }
  if (real.nvrtcGetPCHCreateStatus) r.pch_create_status = real.nvrtcGetPCHCreateStatus(handle);
  if (real.nvrtcGetPCHHeapSizeRequired) {
    size_t heap = 0;
    r.pch_heap_required_code = real.nvrtcGetPCHHeapSizeRequired(handle, &heap);
    r.pch_heap_required = heap;
  }
  return r;
}

void count(const std::string& name) {
  if (const Bridge* b = bridge()) b->count(name.substr(0, 120).c_str());
}

// NVRTC asks for the working folder and stats it on every compile, and writes it into the output
// only with debug information (-G, -lineinfo: DW_AT_comp_dir; measured with NVRTC 13.0, the same
// PTX from two folders otherwise): only then is it in the key, so that processes started in other
// folders share the rest. A relative path it probed stays in the manifest, relative to the folder
// it is looked at from.
void drop_cwd_unless_written(ProbeLog& probes, const std::vector<std::string>& options) {
  for (auto& o : options) {
    std::string_view name = std::string_view(o).substr(0, o.find('='));
    if (name == "-G" || name == "--device-debug" || name == "-lineinfo" || name == "--generate-line-info") return;
  }
  std::string cwd;
  for (auto& [probe, stamp] : probes.probes)
    if (probe == "cwd:" && stamp.rfind("value:", 0) == 0) cwd = stamp.substr(6);
  std::erase_if(probes.probes, [&](const auto& p) { return p.first == "cwd:" || (p.first == cwd && p.second == "dir"); });
}

int compile(void* handle, int num_options, const char* const* options) {
  const RealNvrtc* real = real_or_log();
  if (!real) return k_internal_error;
  auto program = program_of(handle);
  const char* disabled = std::getenv("KILN_NVRTC_DISABLE");
  if (!program || (disabled && *disabled && std::strcmp(disabled, "0") != 0)) return real->nvrtcCompileProgram(handle, num_options, options);
  program->served.reset();  // compiled again (perhaps with other options): answered anew
  std::string& label = program->input.name;
  std::string why = program->unkeyable;
  std::vector<std::string> opts;
  for (int i = 0; i < num_options && why.empty(); ++i) {
    if (!options || !options[i]) {
      why = "an option given as NULL";
      break;
    }
    opts.emplace_back(options[i]);
    why = uncacheable_option(options[i]);
  }
  if (why.empty() && !real->probes_recorded) why = "the real NVRTC's file probes cannot be recorded: " + real->probes_why;
  if (why.empty() && std::getenv("DUMP_KNOBS_TO_FILE")) why = "DUMP_KNOBS_TO_FILE makes NVRTC write a file";
  const Bridge* b = why.empty() ? bridge() : nullptr;
  if (!why.empty() || !b) {
    if (!why.empty()) {
      say(label + ": not cached (" + why + ")");
      count("nvrtc|not_cached|" + why);
    }
    return real->nvrtcCompileProgram(handle, num_options, options);
  }
  program->input.nvrtc_identity = real->identity;
  program->input.options = std::move(opts);
  program->input.environment = environment_in_key();
  std::string key = input_key_text(program->input);
  auto began = std::chrono::steady_clock::now();
  std::map<std::string, std::string> files;
  void* token = nullptr;
  int found = b->lookup(key.data(), key.size(), put_into_map, &files, &token);
  if (found == 0) {
    if (auto result = decode_result(files)) {
      program->served = std::move(*result);
      say(label + ": hit (" + files["source"] + ") in " + std::to_string(ms_since(began)) + " ms");
      return program->served->compile_code;
    }
    say(label + ": a stored compile could not be read: compiling");  // the store side checked it: not expected
  } else if (found < 0) {
    say(label + ": not cached (" + files["error"] + ")");
  } else if (files.count("error")) {
    say(label + ": " + files["error"]);
  }
  ProbeLog probes;
  // The clock file times come from (the kernel's coarse one, a tick behind the precise clock):
  // a write after this instant has a time at or after it.
  struct timespec coarse{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &coarse);
  int64_t started_ns = int64_t{coarse.tv_sec} * 1000000000 + coarse.tv_nsec;
  auto compile_began = std::chrono::steady_clock::now();
  int code;
  {
    RecordProbes recording(probes);
    code = real->nvrtcCompileProgram(handle, num_options, options);
  }
  double compile_ms = ms_since(compile_began);
  if (found != 1) return code;
  drop_cwd_unless_written(probes, program->input.options);
  std::string unkept;
  if (code != 0) unkept = "failed (" + std::to_string(code) + ")";  // the next compile says it again
  for (auto& [probe, stamp] : probes.probes)
    if (unkept.empty() && stamp == "special") unkept = "it read " + probe + ", which is not a file";
  if (!unkept.empty()) {
    b->drop(token);
    say(label + ": compiled in " + std::to_string(compile_ms) + " ms, " + unkept + ", not kept");
    if (code == 0) count("nvrtc|not_cached|" + unkept.substr(0, unkept.find(',')));
    return code;
  }
  try {
    auto result = encode_result(collect(*real, handle, code, *program));
    std::vector<KilnNvrtcFile> out;
    for (auto& [name, bytes] : result) out.push_back({name.c_str(), bytes.data(), bytes.size()});
    std::vector<const char*> paths, stamps;
    for (auto& [probe, stamp] : probes.probes) {
      paths.push_back(probe.c_str());
      stamps.push_back(stamp.c_str());
    }
    std::map<std::string, std::string> kept_error;
    std::string toolchain = "nvrtc " + real->identity;
    int kept = b->keep(token, paths.data(), stamps.data(), paths.size(), started_ns, out.data(), out.size(), compile_ms,
                       label.c_str(), toolchain.c_str(), put_into_map, &kept_error);
    token = nullptr;  // the store side ended it
    say(label + ": compiled in " + std::to_string(compile_ms) + " ms (" + std::to_string(paths.size()) + " probes), " +
        (kept == 0 ? "kept" : "not kept: " + kept_error["error"]));
    if (const char* v = std::getenv("KILN_NVRTC_LOG_PROBES"); v && *v && std::strcmp(v, "0") != 0)
      for (auto& [probe, stamp] : probes.probes) say(label + ":   " + probe + " " + stamp);
    if (kept != 0) count("nvrtc|not_cached|not_kept");
  } catch (const std::exception& e) {  // nothing may leave through NVRTC's C API
    if (token) b->drop(token);
    say(label + ": compiled, not kept (" + e.what() + ")");
  }
  return code;
}

// A served program's output `name`: its Size call's answer, then its bytes.
int served_size(const Program& p, const char* name, size_t* size) {
  auto it = p.served->outputs.find(name);
  if (it == p.served->outputs.end()) return k_invalid_input;
  if (it->second.first == 0) {
    if (!size) return k_invalid_input;
    *size = it->second.second.size();
  }
  return it->second.first;
}
int served_bytes(const Program& p, const char* name, char* out) {
  auto it = p.served->outputs.find(name);
  if (it == p.served->outputs.end()) return k_invalid_input;
  if (it->second.first == 0) {
    if (!out) return k_invalid_input;
    std::memcpy(out, it->second.second.data(), it->second.second.size());
  }
  return it->second.first;
}


}  // namespace
}  // namespace kiln::nvrtc_preload

using namespace kiln::nvrtc_preload;

// Calls the real entry point, or answers NVRTC_ERROR_INTERNAL_ERROR (nullptr for
// nvrtcGetErrorString) when there is no real NVRTC, or NVRTC_ERROR_INVALID_INPUT when this
// real NVRTC lacks it.
#define KILN_FORWARD(name, ...)                                                         \
  do {                                                                                  \
    const RealNvrtc* real = real_or_log();                                              \
    if (!real) return k_internal_error;                                                 \
    return real->name ? real->name(__VA_ARGS__) : k_invalid_input;                      \
  } while (0)
#define KILN_SERVED_OUTPUT(size_name, get_name, output)                                          \
  extern "C" int size_name(void* prog, size_t* size) {                                           \
    if (auto p = program_of(prog); p && p->served) return served_size(*p, output, size);        \
    KILN_FORWARD(size_name, prog, size);                                                         \
  }                                                                                              \
  extern "C" int get_name(void* prog, char* out) {                                               \
    if (auto p = program_of(prog); p && p->served) return served_bytes(*p, output, out);        \
    KILN_FORWARD(get_name, prog, out);                                                           \
  }

extern "C" const char* nvrtcGetErrorString(int result) {
  const RealNvrtc* real = real_or_log();
  return real && real->nvrtcGetErrorString ? real->nvrtcGetErrorString(result) : "NVRTC_ERROR_INTERNAL_ERROR (kiln: no real NVRTC)";
}
extern "C" int nvrtcVersion(int* major, int* minor) { KILN_FORWARD(nvrtcVersion, major, minor); }
extern "C" int nvrtcGetNumSupportedArchs(int* count) { KILN_FORWARD(nvrtcGetNumSupportedArchs, count); }
extern "C" int nvrtcGetSupportedArchs(int* archs) { KILN_FORWARD(nvrtcGetSupportedArchs, archs); }
extern "C" int nvrtcGetPCHHeapSize(size_t* size) { KILN_FORWARD(nvrtcGetPCHHeapSize, size); }
extern "C" int nvrtcSetPCHHeapSize(size_t size) { KILN_FORWARD(nvrtcSetPCHHeapSize, size); }
extern "C" int nvrtcSetFlowCallback(void* prog, int (*callback)(void*, void*), void* payload) {
  KILN_FORWARD(nvrtcSetFlowCallback, prog, callback, payload);
}

extern "C" int nvrtcCreateProgram(void** prog, const char* src, const char* name, int num_headers, const char* const* headers,
                                  const char* const* include_names) {
  const RealNvrtc* real = real_or_log();
  if (!real) return k_internal_error;
  int rc = real->nvrtcCreateProgram(prog, src, name, num_headers, headers, include_names);
  if (rc != 0 || !prog || !*prog) return rc;
  auto p = std::make_shared<Program>();
  p->input.name = name ? name : "default_program";
  p->input.source = src ? src : "";
  p->unkeyable = uncacheable_text(p->input.source);
  for (int i = 0; i < num_headers; ++i) {
    if (!headers || !include_names || !headers[i] || !include_names[i]) {
      p->unkeyable = "a header given as NULL";
      break;
    }
    p->input.headers.emplace_back(include_names[i], headers[i]);
    if (p->unkeyable.empty()) p->unkeyable = uncacheable_text(headers[i]);
  }
  std::lock_guard lock(g_programs_mutex);
  g_programs[*prog] = std::move(p);
  return rc;
}

extern "C" int nvrtcDestroyProgram(void** prog) {
  if (prog && *prog) {
    std::lock_guard lock(g_programs_mutex);
    g_programs.erase(*prog);
  }
  KILN_FORWARD(nvrtcDestroyProgram, prog);
}

extern "C" int nvrtcAddNameExpression(void* prog, const char* name_expression) {
  auto p = program_of(prog);
  if (p && p->served) return k_no_name_expressions_after_compilation;
  const RealNvrtc* real = real_or_log();
  if (!real) return k_internal_error;
  int rc = real->nvrtcAddNameExpression(prog, name_expression);
  if (rc == 0 && p && name_expression) p->input.name_expressions.emplace_back(name_expression);
  return rc;
}

extern "C" int nvrtcCompileProgram(void* prog, int num_options, const char* const* options) {
  try {
    return compile(prog, num_options, options);
  } catch (const std::exception&) {  // nothing may leave through NVRTC's C API (an allocation failed)
    return 1;                        // NVRTC_ERROR_OUT_OF_MEMORY
  }
}

KILN_SERVED_OUTPUT(nvrtcGetPTXSize, nvrtcGetPTX, "ptx")
KILN_SERVED_OUTPUT(nvrtcGetCUBINSize, nvrtcGetCUBIN, "cubin")
KILN_SERVED_OUTPUT(nvrtcGetLTOIRSize, nvrtcGetLTOIR, "ltoir")
KILN_SERVED_OUTPUT(nvrtcGetOptiXIRSize, nvrtcGetOptiXIR, "optixir")
KILN_SERVED_OUTPUT(nvrtcGetTileIRSize, nvrtcGetTileIR, "tileir")
KILN_SERVED_OUTPUT(nvrtcGetProgramLogSize, nvrtcGetProgramLog, "log")

extern "C" int nvrtcGetLoweredName(void* prog, const char* name_expression, const char** lowered_name) {
  if (auto p = program_of(prog); p && p->served) {
    if (!name_expression || !lowered_name) return k_invalid_input;
    auto it = p->served->lowered_names.find(name_expression);
    if (it == p->served->lowered_names.end()) return k_name_expression_not_valid;
    if (it->second.first == 0) *lowered_name = it->second.second.c_str();  // lives until the program is destroyed
    return it->second.first;
  }
  KILN_FORWARD(nvrtcGetLoweredName, prog, name_expression, lowered_name);
}

extern "C" int nvrtcGetPCHCreateStatus(void* prog) {
  if (auto p = program_of(prog); p && p->served) return p->served->pch_create_status;
  KILN_FORWARD(nvrtcGetPCHCreateStatus, prog);
}

extern "C" int nvrtcGetPCHHeapSizeRequired(void* prog, size_t* size) {
  if (auto p = program_of(prog); p && p->served) {
    if (p->served->pch_heap_required_code == 0 && size) *size = p->served->pch_heap_required;
    return p->served->pch_heap_required_code;
  }
  KILN_FORWARD(nvrtcGetPCHHeapSizeRequired, prog, size);
}

// What kiln's own NVRTC loader asks to tell this library from a real NVRTC: the real one's path.
extern "C" const char* kiln_nvrtc_preload_real_library() {
  const RealNvrtc* real = real_nvrtc();
  return real ? real->path.c_str() : nullptr;
}

// __nvrtcCPEx: undocumented (cuBLASLt and cuDNN look it up; every NVRTC 13 has it), so forwarded
// by a jump that leaves every argument register as the caller set it. The real address is looked
// up on the first call, with the argument registers saved around the lookup. (13.2's
// __nvrtcNvvmHandle is not exported: 13.0 lacks it, and a caller that looks it up must be told
// the truth, not handed a jump to nothing.)
extern "C" void* kiln_nvrtc_resolve_hidden(int) {
  const RealNvrtc* real = real_nvrtc();
  if (!real || !real->cpex) {
    const char text[] = "kiln nvrtc: __nvrtcCPEx called, and no real NVRTC has it\n";
    (void)!::write(2, text, sizeof text - 1);
    std::abort();  // no signature to answer an error with
  }
  return real->cpex;
}
#if defined(__x86_64__)
#define KILN_HIDDEN_FORWARD(symbol, which)                                                                  \
  asm(".pushsection .text\n.globl " #symbol "\n.type " #symbol ",@function\n" #symbol ":\n"                              \
      "  push %rdi\n  push %rsi\n  push %rdx\n  push %rcx\n  push %r8\n  push %r9\n  push %rax\n"           \
      "  sub $128, %rsp\n"                                                                                   \
      "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n  movdqu %xmm2, 32(%rsp)\n  movdqu %xmm3, 48(%rsp)\n" \
      "  movdqu %xmm4, 64(%rsp)\n  movdqu %xmm5, 80(%rsp)\n  movdqu %xmm6, 96(%rsp)\n  movdqu %xmm7, 112(%rsp)\n" \
      "  mov $" #which ", %edi\n  call kiln_nvrtc_resolve_hidden@PLT\n  mov %rax, %r11\n"                   \
      "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n  movdqu 32(%rsp), %xmm2\n  movdqu 48(%rsp), %xmm3\n" \
      "  movdqu 64(%rsp), %xmm4\n  movdqu 80(%rsp), %xmm5\n  movdqu 96(%rsp), %xmm6\n  movdqu 112(%rsp), %xmm7\n" \
      "  add $128, %rsp\n"                                                                                   \
      "  pop %rax\n  pop %r9\n  pop %r8\n  pop %rcx\n  pop %rdx\n  pop %rsi\n  pop %rdi\n  jmp *%r11\n"     \
      ".size " #symbol ", .-" #symbol "\n.popsection\n");
KILN_HIDDEN_FORWARD(__nvrtcCPEx, 0)
#endif
