// compile_one: see compile_unit.h.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

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
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/InstrTypes.h>
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
#include <llvm/Support/TimeProfiler.h>

#include "jit/clang/cuda_compat.h"
#include "jit/clang/dependencies.h"
#include "jit/clang/diagnostics.h"
#include "jit/clang/frontend_actions.h"
#include "jit/clang/job_slots.h"
#include "jit/clang/compile_unit.h"
#include "jit/clang/cuda_fat_binary.h"
#include "jit/nvrtc/nvjitlink.h"
#include "support/cpu_time.h"
#include "jit/spirv/spirv_validate.h"
#include "jit/toolchain.h"
#include "support/log.h"
#include "support/cuda_fatbin.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "support/opencl_program_format.h"
#include "support/subprocess.h"


namespace kiln::jit::stages {

void log_stage(const SourceFile& source, std::string_view stage, std::chrono::steady_clock::time_point& since) {
  if (!log_enabled(LogLevel::kDebug)) return;
  auto now = std::chrono::steady_clock::now();
  KILN_LOG_AT(kDebug, "compile", source.path + ": " + std::string(stage) + " in " +
                                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count()) + " ms");
  since = now;
}

void PendingBytes::set(std::string_view bytes, bool failed) {
  {
    std::lock_guard lock(m_mutex);
    m_bytes = bytes;
    m_failed = failed;
    m_done = true;
  }
  m_set.notify_all();
}

std::optional<std::string_view> PendingBytes::wait() {
  JobSlots::Released idle;  // the device passes it waits for may need this slot
  std::unique_lock lock(m_mutex);
  m_set.wait(lock, [&] { return m_done; });
  if (m_failed) return std::nullopt;
  return m_bytes;
}

bool PendingBytes::failed() const {
  std::lock_guard lock(m_mutex);
  return m_done && m_failed;
}

namespace {

// One file whose bytes are still being made (PendingBytes): opening it waits for them. Every
// other path is not here, so an overlay looks further down.
class PendingFileSystem final : public llvm::vfs::FileSystem {
 public:
  PendingFileSystem(std::string path, PendingBytes& bytes) : m_path(std::move(path)), m_bytes(bytes) {}

  llvm::ErrorOr<llvm::vfs::Status> status(const llvm::Twine& path) override {
    if (path.str() != m_path) return std::make_error_code(std::errc::no_such_file_or_directory);
    return status_of(0);  // without waiting: the reader asks for the whole file (getBuffer), whatever its size
  }
  llvm::ErrorOr<std::unique_ptr<llvm::vfs::File>> openFileForRead(const llvm::Twine& path) override {
    if (path.str() != m_path) return std::make_error_code(std::errc::no_such_file_or_directory);
    // Failed device passes: an empty fat binary, so the host pass ends without an error of
    // kiln's making (its object is dropped).
    std::string_view bytes = m_bytes.wait().value_or(std::string_view());
    return std::unique_ptr<llvm::vfs::File>(new Opened(status_of(bytes.size()), bytes));
  }
  llvm::vfs::directory_iterator dir_begin(const llvm::Twine&, std::error_code& ec) override {
    ec = std::make_error_code(std::errc::no_such_file_or_directory);
    return {};
  }
  llvm::ErrorOr<std::string> getCurrentWorkingDirectory() const override { return std::string("/"); }
  std::error_code setCurrentWorkingDirectory(const llvm::Twine&) override { return {}; }

 private:
  class Opened final : public llvm::vfs::File {
   public:
    Opened(llvm::vfs::Status status, std::string_view bytes) : m_status(std::move(status)), m_bytes(bytes) {}
    llvm::ErrorOr<llvm::vfs::Status> status() override { return m_status; }
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> getBuffer(const llvm::Twine& name, int64_t, bool, bool) override {
      return llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(m_bytes.data(), m_bytes.size()), name.str(), false);
    }
    std::error_code close() override { return {}; }

   private:
    llvm::vfs::Status m_status;
    std::string_view m_bytes;
  };

  llvm::vfs::Status status_of(size_t size) const {
    return llvm::vfs::Status(m_path, llvm::sys::fs::UniqueID(0x6b696c6e, 1), llvm::sys::TimePoint<>(), 0, 0, size,
                             llvm::sys::fs::file_type::regular_file, llvm::sys::fs::perms::all_read);
  }

  std::string m_path;
  PendingBytes& m_bytes;
};

}  // namespace

// What a device pass's module defines: its kernels, device functions and variables.
static void defined_symbols(const llvm::Module* module, std::set<std::string>& out) {
  if (!module) return;
  for (const auto& function : *module)
    if (!function.isDeclaration()) out.insert(function.getName().str());
  for (const auto& variable : module->globals())
    if (!variable.isDeclaration()) out.insert(variable.getName().str());
}

// The device-side names of what a host pass's module registers with the CUDA runtime: the
// kernels (__cudaRegisterFunction's third argument) and device variables (__cudaRegisterVar's).
static void registered_device_symbols(const llvm::Module* module, std::set<std::string>& out) {
  if (!module) return;
  for (const char* registrar : {"__cudaRegisterFunction", "__cudaRegisterVar"}) {
    const llvm::Function* function = module->getFunction(registrar);
    if (!function) continue;
    for (const llvm::User* user : function->users()) {
      const auto* call = llvm::dyn_cast<llvm::CallBase>(user);
      if (!call || call->arg_size() < 3) continue;
      const auto* name = llvm::dyn_cast<llvm::GlobalVariable>(call->getArgOperand(2)->stripPointerCasts());
      const auto* text = name && name->hasInitializer() ? llvm::dyn_cast<llvm::ConstantDataSequential>(name->getInitializer()) : nullptr;
      if (text && text->isCString()) out.insert(text->getAsCString().str());
    }
  }
}

PassTrace::PassTrace(const SourceFile& source, std::string pass) : m_source(source), m_pass(std::move(pass)) {
  if (log_enabled(LogLevel::kDebug)) {
    m_start = std::chrono::steady_clock::now();
    m_cpu_start_us = thread_cpu_us();
  }
  const char* dir = ::getenv("KILN_TIME_TRACE");
  if (!dir || !*dir || llvm::timeTraceProfilerEnabled()) return;
  static std::atomic<unsigned> counter{0};
  m_path = std::string(dir) + "/" + std::filesystem::path(source.path).filename().string() + "." + m_pass + "." +
           std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + ".json";
  llvm::timeTraceProfilerInitialize(/*TimeTraceGranularity=*/500, "kiln " + source.path);
}

PassTrace::~PassTrace() {
  if (log_enabled(LogLevel::kDebug)) {
    auto since = m_start;
    log_stage(m_source, m_pass + " (" + std::to_string((thread_cpu_us() - m_cpu_start_us) / 1000) + " ms CPU)", since);
  }
  if (m_path.empty()) return;
  std::error_code ec;
  llvm::raw_fd_ostream out(m_path, ec);
  if (!ec) llvm::timeTraceProfilerWrite(out);
  if (ec) KILN_LOG_AT(kWarn, "compile", "KILN_TIME_TRACE: cannot write " + m_path + ": " + ec.message());
  llvm::timeTraceProfilerCleanup();
}

// Compiles one source. `pch`, when not empty, is a precompiled header of the source's include
// prefix, made by Make::kPrecompiledHeader with the same request options.
bool compile_one(const SourceFile& source, const CompileRequest& request, std::string_view pch, Make make,
                 CollectingConsumer& consumer, CompileResult& result, ObjectFile& object, ModuleOut* module_out,
                 const CudaPass* cuda_pass) {
  JobSlots::Held slot;  // one of the process's jobs (job_slots.h), from the parse to the last byte
  std::vector<std::string>& dependencies = result.dependencies;
  auto memory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  memory->addFile(source.path, 0, llvm::MemoryBuffer::getMemBufferCopy(source.text, source.path));
  if (!pch.empty()) memory->addFile(k_pch_path, 0, llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(pch.data(), pch.size()), k_pch_path, false));
  const bool device_pass = cuda_pass && cuda_pass->device_sm > 0;
  const bool cuda_compat = cuda_pass || (request.language == "cuda" && request.cuda_toolkit_headers);
  if (cuda_compat)
    memory->addFile(k_cuda_compat_path, 0,
                    llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(k_cuda_compat_header, sizeof(k_cuda_compat_header) - 1),
                                                     k_cuda_compat_path, false));
  if (cuda_pass && !device_pass && !cuda_pass->pending_fatbin)
    memory->addFile(k_fatbin_path, 0,
                    llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(cuda_pass->fatbin.data(), cuda_pass->fatbin.size()), k_fatbin_path, false));
  auto overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(llvm::vfs::getRealFileSystem());
  overlay->pushOverlay(memory);
  if (cuda_pass && !device_pass && cuda_pass->pending_fatbin)
    overlay->pushOverlay(llvm::makeIntrusiveRefCnt<PendingFileSystem>(k_fatbin_path, *cuda_pass->pending_fatbin));

  clang::DiagnosticOptions diag_options;
  clang::DiagnosticsEngine diags(clang::DiagnosticIDs::create(), diag_options, &consumer, /*ShouldOwnClient=*/false);

  std::vector<std::string> storage;
  if (request.language == "cuda") {
    // Device code only, to PTX for the oldest listed architecture; libdevice comes from the
    // CUDA toolkit (--cuda-path).
    storage = {clang_driver_path().c_str(), "-x", "cuda", "--cuda-device-only", "--offload-arch=sm_" + std::to_string(cuda_archs_in(request.target).front()),
               "--cuda-path=" + cuda_toolkit_root(), "-Wno-unknown-cuda-version", "-std=c++17", "-O3"};
    if (request.cuda_toolkit_headers) {
      // The toolkit's own headers, which Clang's CUDA wrapper headers include; CUB, Thrust and
      // libcu++ sit in include/cccl since CUDA 13 (system folders: their warnings are theirs).
      if (auto headers = cuda_headers_at(cuda_toolkit_root()))
        for (size_t i = 1; i < headers->dirs.size(); ++i) storage.insert(storage.end(), {"-isystem", headers->dirs[i]});
    } else {
      // Kiln's prelude in place of the CUDA headers, whose parsing costs 0.5-0.7 s.
      storage.insert(storage.end(), {"-nocudainc", "-include", "kiln/cuda_prelude.h"});
    }
  } else if (request.language == "hip") {
    // AMDGPU device code for one gfx architecture, with kiln's prelude in place of HIP's headers
    // and no ROCm device libraries (backends/hip/include/kiln/hip_prelude.h says why).
    storage = {clang_driver_path().c_str(), "-x", "hip", "--cuda-device-only", "--offload-arch=" + march_for(request.target), "-nogpuinc",
               "-nogpulib", "-mcode-object-version=5", "-std=c++17", "-O3", "-include", "kiln/hip_prelude.h"};
  } else if (request.language == "opencl") {
    // OpenCL C 3.0 to LLVM's SPIR-V back end. The preprocessed text a device compiler gets
    // leaves out Clang's own OpenCL header: the device has its own.
    storage = {clang_driver_path().c_str(), "-x", "cl", "-cl-std=CL3.0", "--target=spirv64", "-O3"};
    if (make == Make::kPreprocessed) storage.push_back("-cl-no-stdinc");
  } else if (cuda_pass) {
    // A host library's CUDA source: its user's options as for its C++ sources, with Clang's CUDA
    // headers and the toolkit's. Device code is optimised whatever the host's -O, as nvcc does
    // (its -O is for the host compiler; ptxas optimises at -O3 by default).
    storage = {clang_driver_path().c_str(), "-x", "cuda", "--cuda-path=" + cuda_toolkit_root(), "-Wno-unknown-cuda-version"};
    // CUB, Thrust and libcu++ (include/cccl since CUDA 13), which nvcc's profile adds itself.
    if (auto headers = cuda_headers_at(cuda_toolkit_root()))
      for (size_t i = 1; i < headers->dirs.size(); ++i) storage.insert(storage.end(), {"-isystem", headers->dirs[i]});
    if (device_pass) {
      storage.insert(storage.end(), {"--cuda-device-only", "--offload-arch=sm_" + std::to_string(cuda_pass->device_sm), "-O3"});
    } else {
      storage.insert(storage.end(), {"--cuda-host-only", "-fPIC"});
      for (int sm : cuda_device_sms(request)) storage.push_back("--offload-arch=sm_" + std::to_string(sm));  // __CUDA_ARCH_LIST__
    }
  } else if (request.host_library) {
    // A host library's options are its user's (torch's loader passes -std and no -O): kiln adds
    // only what a shared object needs.
    storage = {clang_driver_path().c_str(), "-x", "c++", "-fPIC"};
  } else {
    storage = {clang_driver_path().c_str(), "-x", "c++", "-std=c++20", "-O3", "-march=" + march_for(request.target), "-fPIC"};
  }
  if (request.language == "cuda" || cuda_pass) {
    const auto& versions = cuda_version_defines();
    storage.insert(storage.end(), versions.begin(), versions.end());
  }
  // After Clang's CUDA wrapper headers, which the driver -includes first.
  if (cuda_compat) storage.insert(storage.end(), {"-include", k_cuda_compat_path});
  for (auto& dir : request.include_dirs) storage.push_back("-I" + dir);
  for (auto& def : request.defines) storage.push_back("-D" + def);
  for (auto& flag : cuda_pass ? request.cuda_flags : request.flags) storage.push_back(flag);
  if (make != Make::kPrecompiledHeader) {
    for (auto& def : request.unit_defines) storage.push_back("-D" + def);
    // The prelude: through the PCH when there is one (it was made from exactly these headers).
    // Not for CUDA sources: they include what they use, as torch's loader has them do.
    if (pch.empty() && !cuda_pass)
      for (auto& header : request.prelude) storage.insert(storage.end(), {"-include", header});
  }
  storage.insert(storage.end(), {request.language == "cuda" || device_pass ? "-S" : "-c", source.path, "-o", "/dev/null"});
  std::vector<const char*> argv;
  for (auto& s : storage) argv.push_back(s.c_str());

  // The driver checks the CUDA installation's version itself; kiln knows 13.0 works.
  diags.setSeverityForGroup(clang::diag::Flavor::WarningOrError, "unknown-cuda-version", clang::diag::Severity::Ignored);
  clang::driver::Driver driver(clang_driver_path().c_str(), k_host_triple, diags, "kiln", overlay);
  driver.setCheckInputsExist(false);
  std::unique_ptr<clang::driver::Compilation> compilation(driver.BuildCompilation(argv));
  if (!compilation || diags.hasErrorOccurred()) return false;

  const clang::driver::Command* cc1 = nullptr;
  for (const auto& job : compilation->getJobs())
    if (llvm::StringRef(job.getCreator().getName()) == "clang") cc1 = &job;
  if (!cc1) {
    diags.Report(diags.getCustomDiagID(clang::DiagnosticsEngine::Error, "the driver produced no compile job"));
    return false;
  }
  llvm::ArrayRef<const char*> cc1_args(cc1->getArguments().data(), cc1->getArguments().size());
  if (!cc1_args.empty() && llvm::StringRef(cc1_args.front()) == "-cc1") cc1_args = cc1_args.drop_front();

  auto invocation = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(*invocation, cc1_args, diags, clang_driver_path().c_str())) return false;
  // The driver asks for -disable-free; in a resident process that leaks ~0.7 MB a compile.
  invocation->getFrontendOpts().DisableFree = false;
  invocation->getCodeGenOpts().DisableFree = false;
  if (cuda_pass && !device_pass) invocation->getCodeGenOpts().CudaGpuBinaryFileName = k_fatbin_path;
  // The module as Clang's code generation leaves it; the caller runs the optimisation (in parts).
  if (module_out && module_out->unoptimised) invocation->getCodeGenOpts().DisableLLVMPasses = true;
  if (!pch.empty()) {
    invocation->getPreprocessorOpts().ImplicitPCHInclude = k_pch_path;
    // Clang would compare the headers' sizes and times with those it recorded. The caller found
    // this PCH by a key that covers their content, which is the stronger check, and a PCH made
    // on another node (same content, other times) must still be usable.
    invocation->getPreprocessorOpts().DisablePCHOrModuleValidation = clang::DisableValidationForModuleKind::PCH;
  }
  // A PCH is written to a private file in RAM (Clang's PCH writer insists on a file), read back
  // and removed.
  std::string pch_file;
  if (make == Make::kPrecompiledHeader) {
    std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (::getenv("TMPDIR") ? ::getenv("TMPDIR") : "/tmp");
    pch_file = dir + "/kiln-pch-XXXXXX";
    int fd = ::mkstemp(pch_file.data());
    if (fd < 0) {
      diags.Report(diags.getCustomDiagID(clang::DiagnosticsEngine::Error, "cannot create a file for a precompiled header in %0")) << dir;
      return false;
    }
    ::close(fd);
    clang::FrontendOptions& fe = invocation->getFrontendOpts();
    fe.ProgramAction = clang::frontend::GeneratePCH;
    fe.OutputFile = pch_file;
    fe.IncludeTimestamps = false;  // the bytes depend on the headers' content only
    // The prefix's text goes into the PCH (a remapped file's buffer is written into it): the
    // compiles that use the PCH have no such file, and Clang reads it whenever a diagnostic's
    // include stack or a presumed location passes through it. Without it, an error or warning
    // in a template instantiated from the headers became "malformed or corrupted precompiled
    // file: could not find file '/kiln-precompiled/prefix.h'" instead of the diagnostic.
    invocation->getPreprocessorOpts().addRemappedFile(source.path,
                                                      llvm::MemoryBuffer::getMemBufferCopy(source.text, source.path).release());
    // The templates the headers instantiate are instantiated once, in the PCH, not again in
    // every compile that uses it: torch/extension.h, a 3.6-4.1 s compile becomes 1.3 s
    // (TOOLCHAIN-FACTS); CUDA, the instantiations CUB's and libcu++'s headers leave pending
    // (thrust::discard_iterator, cuda::std::__hypot, ...: 279 of 550 ms of reduce_sum's compile
    // in -ftime-trace) move into the PCH, and reduce_sum compiles in 0.17 s instead of 0.23-0.38
    // (clang++-22 with -include-pch, this machine, 2026-11-25). The PTX is byte-identical.
    if (request.language == "cpp" || request.language == "cuda") invocation->getLangOpts().PCHInstantiateTemplates = true;
    for (auto& input : fe.Inputs) input = clang::FrontendInputFile(input.getFile(), input.getKind().getHeader());
  }

  PassTrace trace(source, make == Make::kPrecompiledHeader ? "pch"
                          : cuda_pass                     ? (device_pass ? "sm_" + std::to_string(cuda_pass->device_sm) : std::string("host"))
                                                          : std::string("unit"));  // "...: sm_90 (164407 ms CPU) in 329150 ms"
  clang::CompilerInstance instance(invocation);
  // "1 warning generated" goes to stderr otherwise; the diagnostics themselves are data.
  instance.setVerboseOutputStream(std::make_unique<llvm::raw_null_ostream>());
  instance.setVirtualFileSystem(overlay);
  instance.createDiagnostics(&consumer, /*ShouldOwnClient=*/false);
  auto collector = std::make_shared<AllDependencies>();
  instance.addDependencyCollector(collector);
  object.path = source.path;
  instance.setOutputStream(std::make_unique<llvm::raw_svector_ostream>(object.bytes));

  bool ok;
  if (make == Make::kPrecompiledHeader) {
    std::unique_ptr<clang::GeneratePCHAction> action;
    if (cuda_pass)  // a host library's CUDA source: C++ (torch's headers) parsed as CUDA
      action = std::make_unique<GeneratePchAfter<DefineUsedVTables, ForgetEndOfUnitChecks>>();
    else if (request.language == "cuda")
      action = std::make_unique<GeneratePchAfter<ForgetEndOfUnitChecks>>();
    else if (request.language == "cpp")
      action = std::make_unique<GeneratePchAfter<DefineUsedVTables>>();
    else
      action = std::make_unique<clang::GeneratePCHAction>();
    ok = instance.ExecuteAction(*action) && !instance.getDiagnostics().hasErrorOccurred();
    if (ok) {
      auto bytes = read_file(pch_file);
      ok = bytes.ok();
      if (ok) object.bytes.assign(bytes->begin(), bytes->end());
    }
    ::unlink(pch_file.c_str());
  } else if (make == Make::kModule) {
    std::unique_ptr<clang::EmitLLVMOnlyAction> action;
    const bool skip = device_pass && cuda_pass->skip_host_bodies && pch.empty();
    if (skip) {
      instance.getFrontendOpts().SkipFunctionBodies = true;  // those SkipHostOnlyBodies picks
      action = std::make_unique<WithConsumersBefore<clang::EmitLLVMOnlyAction, SkipHostOnlyBodies>>(module_out->context);
    } else {
      action = std::make_unique<clang::EmitLLVMOnlyAction>(module_out->context);
    }
    ok = instance.ExecuteAction(*action) && !instance.getDiagnostics().hasErrorOccurred();
    if (ok) {
      module_out->module = action->takeModule();
      if (skip && cuda_pass->symbols) defined_symbols(module_out->module.get(), cuda_pass->symbols->emplace());
      const clang::TargetOptions& target = instance.getTargetOpts();
      module_out->triple = target.Triple;
      module_out->cpu = target.CPU;
      module_out->features = target.Features;
      module_out->invocation = invocation;
      ok = module_out->module != nullptr;
    }
  } else if (make == Make::kPreprocessed) {
    // Line markers stay, so a device compiler's messages name the op's own files and lines.
    instance.getPreprocessorOutputOpts().ShowLineMarkers = true;
    instance.getPreprocessorOutputOpts().ShowCPP = true;
    llvm::raw_svector_ostream text(object.bytes);
    PreprocessInto action(text);
    ok = instance.ExecuteAction(action) && !instance.getDiagnostics().hasErrorOccurred();
  } else if (device_pass && cuda_pass->skip_host_bodies && pch.empty()) {
    instance.getFrontendOpts().SkipFunctionBodies = true;  // those SkipHostOnlyBodies picks
    WithConsumersBefore<clang::EmitAssemblyAction, SkipHostOnlyBodies> action;
    ok = instance.ExecuteAction(action) && !instance.getDiagnostics().hasErrorOccurred();
    if (ok && cuda_pass->symbols) defined_symbols(action.takeModule().get(), cuda_pass->symbols->emplace());
  } else if (request.language == "cuda" || device_pass) {
    clang::EmitAssemblyAction action;  // PTX is NVPTX's assembly
    ok = instance.ExecuteAction(action) && !instance.getDiagnostics().hasErrorOccurred();
  } else {
    clang::EmitObjAction action;
    ok = instance.ExecuteAction(action) && !instance.getDiagnostics().hasErrorOccurred();
    if (ok && cuda_pass && cuda_pass->symbols) registered_device_symbols(action.takeModule().get(), cuda_pass->symbols->emplace());
  }
  // Clang's own resource headers (stddef.h, __clang_cuda_builtin_vars.h, ...) belong to the
  // toolchain, whose identity is in every key: keep them out of the manifest, so a node that
  // only loads (and has no LLVM installed) can still complete the key.
  const std::string& resource_dir = instance.getHeaderSearchOpts().ResourceDir;
  // The PCH itself is not a header; what it was made of comes with it (the caller adds the
  // PCH's own manifest).
  for (const auto& dep : collector->getDependencies())
    if ((resource_dir.empty() || !path_is_within(absolute_path(dep), absolute_path(resource_dir))) &&
        !path_is_within(absolute_path(dep), k_pch_dir))
      dependencies.push_back(dep);
  for (const auto& missing : collector->missing()) result.missing_files.push_back(missing);
  size_t parsed = 0;
  for (const auto& file : collector->entered()) parsed += file != source.path && !path_is_within(absolute_path(file), k_pch_dir);
  result.headers_parsed = result.headers_parsed.value_or(0) + parsed;
  return ok;
}

}  // namespace kiln::jit::stages
