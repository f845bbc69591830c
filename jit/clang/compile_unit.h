// The in-process Clang toolchain's first stage: one source through Clang's driver (no subprocess),
// a CompilerInvocation and a CompilerInstance, into an object, PTX, an LLVM module, a precompiled
// header or preprocessed text (Make). Every other stage (split_codegen.h, device_link.h,
// cuda_fat_binary.h, clang_toolchain.cpp) calls compile_one; the types they share are here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <clang/Frontend/CompilerInvocation.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "jit/clang/diagnostics.h"
#include "jit/toolchain.h"

namespace kiln::jit::stages {

// The driver finds its resource headers (stddef.h, immintrin.h, ...) relative to the path it is
// given (clang_driver_path(): the wheel's bundled prefix, else the system's LLVM); nothing is ever
// executed from it.
constexpr const char* k_host_triple = "x86_64-pc-linux-gnu";

inline std::string march_for(const std::string& target) {
  // "cpu:x86-64-v3" -> "x86-64-v3"; the target was validated by builders.
  auto pos = target.find(':');
  return pos == std::string::npos ? "x86-64" : target.substr(pos + 1);
}

struct ObjectFile {
  std::string path;  // the source it came from
  llvm::SmallString<0> bytes;
};

// Where a precompiled header handed in by the caller appears to Clang: in the in-memory file
// system, never on disk.
constexpr const char* k_pch_dir = "/kiln-precompiled";
constexpr const char* k_pch_path = "/kiln-precompiled/prefix.pch";

// What compile_one makes of a source: code (an object, or PTX for CUDA), or a precompiled
// header of it (its text is an include prefix).
enum class Make { kCode, kPrecompiledHeader, kModule, kPreprocessed };

// Make::kModule: the optimised LLVM module of a source, in `context`, and what the target
// machine that generates its code must be (CUDA sources linked into one module).
struct ModuleOut {
  llvm::LLVMContext* context = nullptr;
  // In: leave the module as Clang's code generation made it (DisableLLVMPasses), for a caller
  // that runs the optimisation itself (split_device.h).
  bool unoptimised = false;
  std::unique_ptr<llvm::Module> module;
  std::string triple, cpu;
  std::vector<std::string> features;
  std::shared_ptr<clang::CompilerInvocation> invocation;  // what made it: its code generation options
};

// A host library's CUDA source compiles in passes (kiln's in-process stand-in for what nvcc or
// Clang's driver does with subprocesses): device code for each architecture, as PTX; then the
// host code, into which Clang's CUDA code generation embeds the fat binary made of the device
// code (-fcuda-include-gpubinary) with a constructor that registers it and its kernels with the
// CUDA runtime when the library is loaded.
// Bytes that another thread makes while a compile that needs them runs: the fat binary, made by
// a source's device passes while its host pass parses. Thread-safety: any thread may call either.
class PendingBytes {
 public:
  // Hands the bytes over (they must outlive every wait()), or none (`failed`: the maker failed).
  void set(std::string_view bytes, bool failed = false);
  // The bytes, once set: nullopt when their maker failed. Lets the caller's job slot go while it waits.
  std::optional<std::string_view> wait();
  bool failed() const;

 private:
  mutable std::mutex m_mutex;
  std::condition_variable m_set;
  bool m_done = false, m_failed = false;
  std::string_view m_bytes;
};

struct CudaPass {
  int device_sm = 0;        // > 0: the device pass for sm_<device_sm>; 0: the host pass
  std::string_view fatbin;  // the host pass: the fat binary to embed
  // A device pass: parse without the system headers' host-only function bodies
  // (SkipHostOnlyBodies) where it has no PCH, and then set `*symbols` to the functions and
  // variables its module defines (left empty when it parsed every body).
  bool skip_host_bodies = false;
  // The host pass, when set: the device-side names of the kernels and variables it registers.
  std::optional<std::set<std::string>>* symbols = nullptr;
  // The host pass, instead of `fatbin`: the fat binary the device passes are still making. The
  // host pass parses, and generates its code, beside them; Clang's CUDA code generation reads the
  // fat binary only when it finishes the unit (CGNVCUDARuntime::makeModuleCtorFunction), and
  // waits there for it. When the device passes fail, it gets an empty one (its object is dropped).
  PendingBytes* pending_fatbin = nullptr;
};

// Where the host pass finds the fat binary: in the in-memory file system, beside a PCH, in the
// folder kept out of dependency lists.
constexpr const char* k_fatbin_path = "/kiln-precompiled/device.fatbin";


// Logs at debug level how long a stage of `source` took since `since` (and resets it): where a
// library's compile spends its time, per source and per stage (KILN_LOG=debug).
void log_stage(const SourceFile& source, std::string_view stage, std::chrono::steady_clock::time_point& since);

// What one stage on one thread costs, for people: at debug level (KILN_LOG=debug), its wall and
// CPU time ("causal_conv1d_bwd.cu: sm_90 (164407 ms CPU) in 329150 ms"; on a busy machine the CPU
// time is the figure to compare). With KILN_TIME_TRACE=<folder>, Clang's own -ftime-trace of it
// too (front end, template instantiation, each optimisation pass, code generation), written to
// <folder>/<source>.<stage>.<pid>-<n>.json (Chrome's trace format: chrome://tracing, Perfetto):
// where a slow source's time goes inside kiln's own pipeline (its PCHs, its skipped host-only
// bodies, its parts), which a clang++ subprocess with -ftime-trace would not show. The CUDA
// passes also leave the PTX they made there (cuda_fat_binary.cpp). Per thread: work this stage
// hands to other threads is in their own traces.
class PassTrace {
 public:
  PassTrace(const SourceFile& source, std::string stage);
  ~PassTrace();
  PassTrace(const PassTrace&) = delete;
  PassTrace& operator=(const PassTrace&) = delete;

 private:
  const SourceFile& m_source;
  std::string m_pass, m_path;
  std::chrono::steady_clock::time_point m_start;
  int64_t m_cpu_start_us = 0;  // support/cpu_time.h: thread_cpu_us()
};

// Compiles one source. `pch`, when not empty, is a precompiled header of the source's include
// prefix, made by Make::kPrecompiledHeader with the same request options.
bool compile_one(const SourceFile& source, const CompileRequest& request, std::string_view pch, Make make,
                 CollectingConsumer& consumer, CompileResult& result, ObjectFile& object, ModuleOut* module_out = nullptr,
                 const CudaPass* cuda_pass = nullptr);

// The precompiled header handed in for source `source`, or none.
inline std::string_view pch_for(const CompileRequest& request, size_t source) {
  auto it = request.precompiled_headers.find(source);
  return it == request.precompiled_headers.end() ? std::string_view() : it->second;
}

}  // namespace kiln::jit::stages
