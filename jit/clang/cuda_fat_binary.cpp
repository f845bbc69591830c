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
#include "jit/clang/job_slots.h"
#include "jit/clang/split_device.h"
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
  clang::DiagnosticOptions options;
  options.ShowColors = false;
  std::vector<std::unique_ptr<CollectingConsumer>> consumers;
  for (size_t i = 0; i < n; ++i) consumers.push_back(std::make_unique<CollectingConsumer>(options));
  std::vector<CompileResult> passes(n);
  std::vector<ObjectFile> ptx(n);
  std::vector<char> compiled(n, 0);
  std::vector<std::optional<std::set<std::string>>> defined(n);  // set by the passes that skipped
  std::vector<std::string> ptx_text(n);
  std::vector<std::vector<std::string>> ptx_parts(n);  // per architecture: its PTX, in parts when split
  std::vector<std::vector<std::string>> relocatable(n);  // and the parts' relocatable cubins, when ptxas made them
  // KILN_CUDA_SPLIT_DEVICE=0: each device pass in one piece (a check, and a way out).
  const char* split_env = ::getenv("KILN_CUDA_SPLIT_DEVICE");
  const bool split = !(split_env && std::string_view(split_env) == "0");
  std::vector<Result<std::string>> cubins(n, Result<std::string>(std::string()));
  std::vector<bool> wants_cubin(n, false), wants_ptx(n, false);
  for (auto& arch : request.cuda_archs) {
    int code = cuda_arch_code(arch);
    for (size_t i = 0; i < n; ++i)
      if (sms[i] == (code < 0 ? -code : code)) (code < 0 ? wants_ptx : wants_cubin)[i] = true;
  }
  // The device side, on a thread of its own: the device passes (a thread per architecture), the
  // cubins (linked side by side), the fat binary. The host pass parses and generates its code
  // meanwhile on this thread, and waits for the fat binary only at the end of its unit (CudaPass::
  // pending_fatbin): on two cores, causal-conv1d's causal_conv1d_bwd.cu spent its host pass after
  // its device pass, one core idle. Each pass holds a job slot (job_slots.h) only while it runs.
  PendingBytes fatbin;
  Result<std::string> encoded(std::string{});
  std::string device_error;  // why the device side made no fat binary, when it did not
  HelperThreads device_side;  // support/cpu_time.h: its CPU, and its helpers', counted for this thread
  device_side.start([&] {
    auto stage_start = std::chrono::steady_clock::now();
    auto device = [&](size_t i) {
      CudaPass pass{sms[i], {}, skip_host_bodies, &defined[i]};
      if (split && !wants_ptx[i]) {
        // Its optimisation and code generation in parts, side by side (split_device.h).
        compiled[i] = compile_device_split(source, request, cuda_pass_pch(request, index, sms[i]), pass, *consumers[i], passes[i],
                                           ptx_parts[i], relocatable[i]);
      } else {
        // PTX for the fat binary (compute_XX) is one module: the pass is not split.
        compiled[i] = compile_one(source, request, cuda_pass_pch(request, index, sms[i]), Make::kCode, *consumers[i], passes[i],
                                  ptx[i], nullptr, &pass);
        ptx_parts[i] = {std::string(ptx[i].bytes.data(), ptx[i].bytes.size())};
      }
    };
    HelperThreads passes;
    for (size_t i = 1; i < n; ++i) passes.start([&, i] { device(i); });
    device(0);
    passes.join();
    if (std::find(compiled.begin(), compiled.end(), 0) != compiled.end()) return fatbin.set({}, /*failed=*/true);
    log_stage(source, "device passes", stage_start);
    // KILN_TIME_TRACE=<folder> (compile_unit.h): the PTX that ptxas (in nvJitLink) takes next,
    // beside the passes' traces, to time ptxas on it alone.
    if (const char* dir = ::getenv("KILN_TIME_TRACE"); dir && *dir)
      for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < ptx_parts[i].size(); ++k)
          (void)write_file_atomic(std::string(dir) + "/" + std::filesystem::path(source.path).filename().string() + ".sm_" +
                                      std::to_string(sms[i]) + "-part" + std::to_string(k) + "." + std::to_string(::getpid()) + ".ptx",
                                  ptx_parts[i][k], /*durable=*/false);
    // PTX for the fat binary: the unsplit pass's (nvJitLink reads PTX up to its NUL: a std::string has one after its bytes).
    for (size_t i = 0; i < n; ++i)
      if (wants_ptx[i]) ptx_text[i] = ptx_parts[i].front();
    // The device code: cubins (linked side by side), then PTX, as nvcc orders them.
    HelperThreads links;
    for (size_t i = 0; i < n; ++i)
      if (wants_cubin[i])
        links.start([&, i] {
          JobSlots::Held slot;
          cubins[i] = relocatable[i].empty()
                          ? link_cubin_parts(std::vector<std::string_view>(ptx_parts[i].begin(), ptx_parts[i].end()), sms[i])
                          : link_relocatable_cubins(std::vector<std::string_view>(relocatable[i].begin(), relocatable[i].end()), sms[i]);
        });
    links.join();
    log_stage(source, "cubins linked", stage_start);
    std::vector<FatbinImage> images;
    for (size_t i = 0; i < n; ++i) {
      if (!wants_cubin[i]) continue;
      if (!cubins[i].ok()) {
        device_error = "the device code for sm_" + std::to_string(sms[i]) + " does not link: " + cubins[i].status().message();
        return fatbin.set({}, /*failed=*/true);
      }
      images.push_back({FatbinImage::Kind::kCubin, sms[i], *cubins[i]});
    }
    for (size_t i = 0; i < n; ++i)
      if (wants_ptx[i]) images.push_back({FatbinImage::Kind::kPtx, sms[i], ptx_text[i]});
    // Compressed as `fatbinary --compress-all` does, where the driver the cubins need reads zstd
    // (support/cuda_fatbin.h): mamba-ssm's selective scan, 4.8 MB of cubin, is 0.8 MB stored.
    encoded = encode_fatbin(images, nvjitlink_major() >= 13 ? FatbinCompression::kZstd : FatbinCompression::kNone);
    if (!encoded.ok()) {
      device_error = encoded.status().message();
      return fatbin.set({}, /*failed=*/true);
    }
    fatbin.set(*encoded);
  });
  // What the host registers is looked up when a device pass may skip bodies.
  auto host_start = std::chrono::steady_clock::now();
  std::optional<std::set<std::string>> registered;
  CudaPass host{0, {}, false, skip_host_bodies ? &registered : nullptr, &fatbin};
  bool host_ok = compile_one(source, request, cuda_pass_pch(request, index, 0), Make::kCode, consumer, part, object, nullptr, &host);
  device_side.join();
  log_stage(source, "host pass (beside the device passes)", host_start);
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
  if (!ok || fatbin.failed()) {
    // The device side decides: what the host pass said (it ran on an empty fat binary) is left
    // out, as when it ran only after the device passes had succeeded.
    consumer.clear();
    object = ObjectFile{};
    if (!device_error.empty()) part.diagnostics.push_back({Diagnostic::Severity::kError, source.path, 0, 0, device_error});
    return false;
  }
  ok = host_ok;
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
