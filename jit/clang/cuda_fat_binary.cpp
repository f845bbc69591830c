// A host library's CUDA source into a host object: see cuda_fat_binary.h.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <atomic>

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticIDs.h>
#include <clang/Basic/DiagnosticDriver.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/CodeGen/BackendUtil.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Driver/Compilation.h>
#include <clang/Driver/Driver.h>
#include <clang/Driver/Tool.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/FrontendActions.h>
#include <clang/Frontend/MultiplexConsumer.h>
#include <clang/Lex/HeaderSearchOptions.h>
#include <clang/Lex/PPCallbacks.h>
#include <clang/Lex/Preprocessor.h>
#include <clang/Sema/Scope.h>
#include <clang/Sema/Sema.h>
#include <clang/Sema/SemaConsumer.h>
#include <clang/Lex/PreprocessorOptions.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Frontend/Utils.h>
#include <lld/Common/Driver.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/Constants.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/Utils/SplitModule.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>

#include "jit/clang/cuda_compat.h"
#include "jit/clang/dependencies.h"
#include "jit/clang/diagnostics.h"
#include "jit/clang/frontend_actions.h"
#include "jit/clang/cuda_fat_binary.h"
#include "jit/nvrtc/nvjitlink.h"
#include "jit/spirv/spirv_validate.h"
#include "jit/toolchain.h"
#include "support/cuda_fatbin.h"
#include "support/cpu_time.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"
#include "support/log.h"
#include "support/file_util.h"
#include "support/opencl_program_format.h"
#include "support/subprocess.h"


namespace kiln::jit::stages {

// A host library's CUDA source into a host object (see CudaPass): the device passes, one thread
// per architecture; a cubin per "sm_" architecture from its own PTX by nvJitLink (each pass
// compiled with that architecture's __CUDA_ARCH__, as nvcc's -gencode does), the PTX of each
// "compute_" one; one fat binary of them; the host pass. What the compiler said goes into
// `consumer` (the host pass) and `part` (the device passes' diagnostics, without repeats, and
// their log when they failed or said something the host pass did not).
//
// `skip_host_bodies`: the device passes skip the system headers' host-only function bodies
// (SkipHostOnlyBodies); `incomplete` then says whether the host pass registers a kernel or
// variable that a device pass did not define (a skipped body instantiated it), and the unit
// must be compiled again without skipping.
static bool compile_cuda_passes(const SourceFile& source, size_t index, const CompileRequest& request, CollectingConsumer& consumer,
                                CompileResult& part, ObjectFile& object, bool skip_host_bodies, std::string& incomplete) {
  std::vector<int> sms = cuda_device_sms(request);
  if (sms.empty()) {
    part.diagnostics.push_back({Diagnostic::Severity::kError, source.path, 0, 0,
                                "no CUDA architecture to compile this source for (cuda_archs is empty)"});
    return false;
  }
  const size_t n = sms.size();
  auto stage_start = std::chrono::steady_clock::now();
  clang::DiagnosticOptions options;
  options.ShowColors = false;
  std::vector<std::unique_ptr<CollectingConsumer>> consumers;
  for (size_t i = 0; i < n; ++i) consumers.push_back(std::make_unique<CollectingConsumer>(options));
  std::vector<CompileResult> passes(n);
  std::vector<ObjectFile> ptx(n);
  std::vector<char> compiled(n, 0);
  std::vector<std::optional<std::set<std::string>>> defined(n);  // set by the passes that skipped
  auto device = [&](size_t i) {
    CudaPass pass{sms[i], {}, skip_host_bodies, &defined[i]};
    compiled[i] = compile_one(source, request, cuda_pass_pch(request, index, sms[i]), Make::kCode, *consumers[i], passes[i], ptx[i],
                              nullptr, &pass);
  };
  std::vector<std::thread> threads;
  std::atomic<int64_t> helpers_cpu_us{0};  // support/cpu_time.h
  for (size_t i = 1; i < n; ++i)
    threads.emplace_back([&, i] {
      device(i);
      helpers_cpu_us.fetch_add(work_cpu_us());
    });
  device(0);
  for (auto& t : threads) t.join();
  add_joined_helpers_cpu_us(helpers_cpu_us.load());
  bool ok = true;
  std::set<std::string> seen;
  for (size_t i = 0; i < n; ++i) {
    ok = ok && compiled[i];
    bool news = false;
    for (auto& d : consumers[i]->take_diagnostics())
      if (seen.insert(d.to_string()).second) {
        part.diagnostics.push_back(d);
        news = news || d.severity != Diagnostic::Severity::kNote;
      }
    if (news || !compiled[i]) part.log += consumers[i]->text();
    part.dependencies.insert(part.dependencies.end(), passes[i].dependencies.begin(), passes[i].dependencies.end());
    part.missing_files.insert(part.missing_files.end(), passes[i].missing_files.begin(), passes[i].missing_files.end());
  }
  if (!ok) return false;
  // nvJitLink reads PTX up to its NUL: a std::string has one after its bytes.
  log_stage(source, "device passes", stage_start);
  std::vector<std::string> ptx_text(n);
  for (size_t i = 0; i < n; ++i) ptx_text[i].assign(ptx[i].bytes.data(), ptx[i].bytes.size());
  // The device code: cubins (linked side by side), then PTX, as nvcc orders them.
  std::vector<Result<std::string>> cubins(n, Result<std::string>(std::string()));
  std::vector<bool> wants_cubin(n, false), wants_ptx(n, false);
  for (auto& arch : request.cuda_archs) {
    int code = cuda_arch_code(arch);
    for (size_t i = 0; i < n; ++i)
      if (sms[i] == (code < 0 ? -code : code)) (code < 0 ? wants_ptx : wants_cubin)[i] = true;
  }
  threads.clear();
  for (size_t i = 0; i < n; ++i)
    if (wants_cubin[i])
      threads.emplace_back([&, i] { cubins[i] = link_cubin(ptx_text[i], sms[i]); });
  for (auto& t : threads) t.join();
  log_stage(source, "cubins linked", stage_start);
  std::vector<FatbinImage> images;
  for (size_t i = 0; i < n; ++i) {
    if (!wants_cubin[i]) continue;
    if (!cubins[i].ok()) {
      part.diagnostics.push_back({Diagnostic::Severity::kError, source.path, 0, 0,
                                  "the device code for sm_" + std::to_string(sms[i]) + " does not link: " + cubins[i].status().message()});
      return false;
    }
    images.push_back({FatbinImage::Kind::kCubin, sms[i], *cubins[i]});
  }
  for (size_t i = 0; i < n; ++i)
    if (wants_ptx[i]) images.push_back({FatbinImage::Kind::kPtx, sms[i], ptx_text[i]});
  auto fatbin = encode_fatbin(images);
  if (!fatbin.ok()) {
    part.diagnostics.push_back({Diagnostic::Severity::kError, source.path, 0, 0, fatbin.status().message()});
    return false;
  }
  // What the host registers is looked up only when a device pass skipped bodies.
  std::optional<std::set<std::string>> registered;
  const bool any_skipped = std::any_of(defined.begin(), defined.end(), [](const auto& d) { return d.has_value(); });
  CudaPass host{0, *fatbin, false, any_skipped ? &registered : nullptr};
  ok = compile_one(source, request, cuda_pass_pch(request, index, 0), Make::kCode, consumer, part, object, nullptr, &host);
  log_stage(source, "host pass", stage_start);
  if (ok && registered)
    for (size_t i = 0; i < n && incomplete.empty(); ++i)
      if (defined[i])
        for (const auto& name : *registered)
          if (!defined[i]->count(name)) {
            incomplete = name + " (sm_" + std::to_string(sms[i]) + ")";
            break;
          }
  return ok;
}

bool compile_cuda_unit(const SourceFile& source, size_t index, const CompileRequest& request, CollectingConsumer& consumer,
                       CompileResult& part, ObjectFile& object) {
  // KILN_CUDA_HOST_BODIES=1: the device passes parse every body (a check, and a way out).
  const char* keep = ::getenv("KILN_CUDA_HOST_BODIES");
  const bool skip = !(keep && std::string_view(keep) == "1");
  const CompileResult at_entry = part;
  std::string incomplete;
  bool ok = compile_cuda_passes(source, index, request, consumer, part, object, skip, incomplete);
  if (incomplete.empty()) return ok;
  KILN_LOG_AT(kDebug, "compile", source.path + ": the host pass registers " + incomplete +
                                     ", which the device pass did not define without the headers' host-only bodies: compiling it again with them");
  // The first try's diagnostics, log and dependencies go; the second's replace them.
  part = at_entry;
  consumer.clear();
  object = ObjectFile{};
  return compile_cuda_passes(source, index, request, consumer, part, object, false, incomplete);
}

}  // namespace kiln::jit::stages
