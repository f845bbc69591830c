// The in-process Clang toolchain: C++ kernel sources -> object code (Clang, LLVM 22) ->
// a shared object (lld), all inside the calling process; no compiler or linker is started.
//
// This file and the stages split out beside it (diagnostics.h, dependencies.h,
// frontend_actions.h, cuda_compat.h: headers included only here, so still one translation unit)
// are built into libkiln_jit_clang.so, which builders load on the first cache miss.
//
// The pipeline follows TOOLCHAIN-FACTS.md: an in-memory copy of each source overlaid on the
// real file system -> clang::driver::Driver builds the job list (no subprocess) -> the
// arguments of the "clang" job (the cc1 line) -> CompilerInvocation -> CompilerInstance ->
// EmitObjAction into a memory buffer. Objects are then linked by lld::elf::link.
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
#include "jit/nvrtc/nvjitlink.h"
#include "jit/spirv/spirv_validate.h"
#include "jit/toolchain.h"
#include "support/cuda_fatbin.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "support/opencl_program_format.h"
#include "support/subprocess.h"

LLD_HAS_DRIVER(elf)

namespace kiln::jit {
namespace {

// The driver finds its resource headers (stddef.h, immintrin.h, ...) relative to the path it is
// given (clang_driver_path(): the wheel's bundled prefix, else the system's LLVM); nothing is ever
// executed from it.
constexpr const char* k_host_triple = "x86_64-pc-linux-gnu";

std::string march_for(const std::string& target) {
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
struct CudaPass {
  int device_sm = 0;        // > 0: the device pass for sm_<device_sm>; 0: the host pass
  std::string_view fatbin;  // the host pass: the fat binary to embed
};

// Where the host pass finds the fat binary: in the in-memory file system, beside a PCH, in the
// folder kept out of dependency lists.
constexpr const char* k_fatbin_path = "/kiln-precompiled/device.fatbin";

// "sm_90" -> 90 (a cubin), "compute_90" -> -90 (PTX); 0 for anything else.
int cuda_arch_code(std::string_view arch) {
  bool ptx = arch.rfind("compute_", 0) == 0;
  if (!ptx && arch.rfind("sm_", 0) != 0) return 0;
  std::string digits(arch.substr(ptx ? 8 : 3));
  if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  int sm = std::atoi(digits.c_str());
  return ptx ? -sm : sm;
}

// The architectures device code is compiled for: every sm and compute listed, ascending.
std::vector<int> cuda_device_sms(const CompileRequest& request) {
  std::set<int> sms;
  for (auto& arch : request.cuda_archs)
    if (int code = cuda_arch_code(arch)) sms.insert(code < 0 ? -code : code);
  return {sms.begin(), sms.end()};
}

// Compiles one source. `pch`, when not empty, is a precompiled header of the source's include
// prefix, made by Make::kPrecompiledHeader with the same request options.
bool compile_one(const SourceFile& source, const CompileRequest& request, std::string_view pch, Make make,
                 CollectingConsumer& consumer, CompileResult& result, ObjectFile& object, ModuleOut* module_out = nullptr,
                 const CudaPass* cuda_pass = nullptr) {
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
  if (cuda_pass && !device_pass)
    memory->addFile(k_fatbin_path, 0,
                    llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(cuda_pass->fatbin.data(), cuda_pass->fatbin.size()), k_fatbin_path, false));
  auto overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(llvm::vfs::getRealFileSystem());
  overlay->pushOverlay(memory);

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
    if (request.language == "cuda")
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
    clang::EmitLLVMOnlyAction action(module_out->context);
    ok = instance.ExecuteAction(action) && !instance.getDiagnostics().hasErrorOccurred();
    if (ok) {
      module_out->module = action.takeModule();
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
  } else if (request.language == "cuda" || device_pass) {
    clang::EmitAssemblyAction action;  // PTX is NVPTX's assembly
    ok = instance.ExecuteAction(action) && !instance.getDiagnostics().hasErrorOccurred();
  } else {
    clang::EmitObjAction action;
    ok = instance.ExecuteAction(action) && !instance.getDiagnostics().hasErrorOccurred();
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

// How many threads one compile may use: $KILN_COMPILE_THREADS, else the cores. A value that is
// not a number from 1 to 1024 is a warning in `result` and the cores are used.
unsigned compile_threads(CompileResult& result) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const char* env = std::getenv("KILN_COMPILE_THREADS");
  if (!env) return cores;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || n < 1 || n > 1024) {
    std::string message = std::string("KILN_COMPILE_THREADS=") + env + " is not a number from 1 to 1024; using " +
                          std::to_string(cores) + " (the cores)";
    result.diagnostics.push_back({Diagnostic::Severity::kWarning, "", 0, 0, message});
    result.log += "warning: " + message + "\n";
    return cores;
  }
  return static_cast<unsigned>(n);
}

// A host library's C++ unit with its code generation split (what LLVM's parallel LTO code
// generation does): Clang parses and optimises the unit as EmitObjAction would, the optimised
// module is split into k_codegen_partitions parts (comdats and what must stay together kept
// together, locals that cross parts made hidden), and each part's object is generated by Clang's
// own back end (its target options, no optimisation pipeline run twice) on `threads` threads, in
// LLVM contexts of their own. A torch extension's compile spends most of its time in the back end
// once torch's headers come from a PCH (fused_norm.cpp: ~1.4 s of ~1.8 s, a third of it code
// generation), and a lone source would otherwise leave the other cores idle.
// The number of parts is fixed, not the number of threads, so the library's bytes do not depend
// on the machine that built it.
constexpr unsigned k_codegen_partitions = 4;

bool compile_host_split(const SourceFile& source, size_t unit_index, const CompileRequest& request, std::string_view pch,
                        CollectingConsumer& consumer, CompileResult& result, std::vector<ObjectFile>& objects, unsigned threads) {
  llvm::LLVMContext context;
  ModuleOut unit;
  unit.context = &context;
  ObjectFile unused;
  if (!compile_one(source, request, pch, Make::kModule, consumer, result, unused, &unit)) return false;
  // The split makes locals that parts share hidden globals under their own names (".str.3",
  // std::__ioinit): two sources of one library would then define the same ones. Each unit's
  // locals get the unit's number first (deterministic, and nothing outside the library sees them).
  const std::string suffix = ".kiln.u" + std::to_string(unit_index);
  auto rename_local = [&](llvm::GlobalValue& g) {
    if (g.hasLocalLinkage()) g.setName(g.hasName() ? g.getName().str() + suffix : "kiln.unnamed" + suffix);
  };
  for (auto& g : unit.module->global_values()) rename_local(g);
  std::string data_layout = unit.module->getDataLayoutStr();
  std::vector<llvm::SmallString<0>> parts;
  llvm::SplitModule(*unit.module, k_codegen_partitions, [&](std::unique_ptr<llvm::Module> part) {
    llvm::raw_svector_ostream out(parts.emplace_back());
    llvm::WriteBitcodeToFile(*part, out);
  });
  unit.module.reset();
  objects.assign(parts.size(), ObjectFile{});
  clang::DiagnosticOptions options;
  options.ShowColors = false;
  std::vector<std::unique_ptr<CollectingConsumer>> consumers;
  for (size_t i = 0; i < parts.size(); ++i) consumers.push_back(std::make_unique<CollectingConsumer>(options));
  std::vector<char> done(parts.size(), 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < parts.size();) {
      llvm::LLVMContext own;
      auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(llvm::StringRef(parts[i].data(), parts[i].size()), "part"), own);
      if (!module) {
        consumers[i]->add_error("code generation part " + std::to_string(i) + " does not read back: " +
                                llvm::toString(module.takeError()));
        continue;
      }
      clang::CompilerInstance instance(std::make_shared<clang::CompilerInvocation>(*unit.invocation));
      instance.getCodeGenOpts().DisableLLVMPasses = true;  // optimised already, as a whole
      instance.createDiagnostics(consumers[i].get(), /*ShouldOwnClient=*/false);
      objects[i].path = source.path;
      clang::emitBackendOutput(instance, instance.getCodeGenOpts(), data_layout, module->get(), clang::Backend_EmitObj,
                               llvm::vfs::getRealFileSystem(), std::make_unique<llvm::raw_svector_ostream>(objects[i].bytes));
      done[i] = !instance.getDiagnostics().hasErrorOccurred();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::min<size_t>(threads, parts.size()); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  bool ok = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    ok = ok && done[i];
    consumer.absorb(*consumers[i]);
  }
  return ok;
}

// The name of the device variable that references name expression `i`.
std::string entry_reference(size_t i) { return "kiln_entry_ref_" + std::to_string(i); }

// Finds `.global .align 8 .u64 <variable> = <symbol>;` in `ptx`, removes that line and returns
// the symbol when it is a kernel (.entry) of the PTX.
std::optional<std::string> take_entry_reference(std::string& ptx, const std::string& variable) {
  size_t at = ptx.find(" " + variable + " = ");
  if (at == std::string::npos) return std::nullopt;
  size_t line_start = ptx.rfind('\n', at);
  line_start = line_start == std::string::npos ? 0 : line_start + 1;
  size_t value = at + variable.size() + 4, end = ptx.find(';', value);
  size_t line_end = ptx.find('\n', value);
  if (end == std::string::npos || line_end == std::string::npos || end > line_end) return std::nullopt;
  std::string symbol = ptx.substr(value, end - value);
  if (symbol.rfind("generic(", 0) == 0 && symbol.back() == ')') symbol = symbol.substr(8, symbol.size() - 9);
  ptx.erase(line_start, line_end + 1 - line_start);
  if (ptx.find(".entry " + symbol + "(") == std::string::npos) return std::nullopt;
  return symbol;
}

std::string_view pch_for(const CompileRequest& request, size_t source) {
  auto it = request.precompiled_headers.find(source);
  return it == request.precompiled_headers.end() ? std::string_view() : it->second;
}

// Device sources as one module: each compiled to LLVM IR, linked (llvm::Linker), `inspect`ed
// (it may read and change the module; false fails the compile), optimised again as a whole
// (cross-source inlining, as nvJitLink's LTO does for NVRTC) and emitted by the target's back
// end as `type` (PTX is NVPTX's assembly; AMDGPU and SPIR-V emit objects). kiln's own stand-in
// for `-fgpu-rdc` plus a device link, with no symbol renamed by a per-file id, so the output does
// not depend on where the files are.
using ModuleInspector = std::function<bool(llvm::Module&, const llvm::DataLayout&, CompileResult&)>;

// The SPIR-V back end's last step, in kiln-spirv: LLVM 22 keeps that back end's module state in a
// static, and a second module emitted in one process can come out with duplicate ids
// (jit/spirv/spirv_emit_main.cpp). The module is handed over as bitcode.
bool emit_spirv_in_helper(llvm::Module& module, const std::string& triple, const std::string& cpu, const std::string& features,
                          CompileResult& result, std::string& out) {
  llvm::SmallString<0> bitcode;
  llvm::raw_svector_ostream stream(bitcode);
  llvm::WriteBitcodeToFile(module, stream);
  std::string helper = spirv_helper_path();
  auto ran = run_subprocess({helper, triple, cpu, features}, std::string_view(bitcode.data(), bitcode.size()));
  if (!ran.ok() || ran->signal || ran->exit_code != 0 || ran->out.empty()) {
    std::string why = !ran.ok() ? ran.status().message() : ran->how_it_ended() + (ran->err.empty() ? "" : ": " + ran->err);
    result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "the SPIR-V emitter " + helper + " " + why});
    return false;
  }
  out = std::move(ran->out);
  return true;
}

bool link_device_sources(const std::vector<SourceFile>& sources, const CompileRequest& request, CollectingConsumer& consumer,
                         CompileResult& result, llvm::CodeGenFileType type, const ModuleInspector& inspect, std::string& out) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> linked;
  ModuleOut first;
  for (size_t i = 0; i < sources.size(); ++i) {
    ModuleOut one;
    one.context = &context;
    ObjectFile unused;
    if (!compile_one(sources[i], request, pch_for(request, i), Make::kModule, consumer, result, unused, &one)) return false;
    if (!linked) {
      linked = std::move(one.module);
      first = std::move(one);
    } else if (llvm::Linker::linkModules(*linked, std::move(one.module))) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, sources[i].path, 0, 0,
                                    "cannot link this source's device code with the others (a symbol defined twice?)"});
      return false;
    }
  }
  std::string error;
  llvm::Triple triple(first.triple);
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) {
    result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "no " + first.triple + " target in this LLVM: " + error});
    return false;
  }
  std::string features;
  for (auto& f : first.features) features += (features.empty() ? "" : ",") + f;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, first.cpu, features, llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  linked->setDataLayout(machine->createDataLayout());
  if (inspect && !inspect(*linked, linked->getDataLayout(), result)) return false;
  {
    llvm::LoopAnalysisManager loops;
    llvm::FunctionAnalysisManager functions;
    llvm::CGSCCAnalysisManager cgscc;
    llvm::ModuleAnalysisManager modules;
    llvm::PassBuilder builder(machine.get());
    builder.registerModuleAnalyses(modules);
    builder.registerCGSCCAnalyses(cgscc);
    builder.registerFunctionAnalyses(functions);
    builder.registerLoopAnalyses(loops);
    builder.crossRegisterProxies(loops, functions, cgscc, modules);
    builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*linked, modules);
  }
  if (triple.isSPIRV()) return emit_spirv_in_helper(*linked, first.triple, first.cpu, features, result, out);
  llvm::SmallString<0> bytes;
  llvm::raw_svector_ostream stream(bytes);
  llvm::legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, stream, nullptr, type)) {
    result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "the " + first.triple + " back end cannot emit this module"});
    return false;
  }
  passes.run(*linked);
  out.assign(bytes.data(), bytes.size());
  return true;
}

// A templated entry is instantiated by taking its address in a device variable,
// kiln_entry_ref_<i>: Clang resolves the expression as C++ would, and the variable's initialiser
// names the instance's symbol (read from the PTX for CUDA, from the module for AMD GPUs), after
// which the variable is removed. Appended to the first source, under a #line that names them.
void append_entry_references(SourceFile& first, const std::vector<std::string>& name_expressions) {
  if (!name_expressions.empty()) first.text += "\n#line 1 \"kiln: entry points (generated)\"";
  for (size_t i = 0; i < name_expressions.size(); ++i)
    first.text += "\n__attribute__((device)) void* " + entry_reference(i) + " = (void*)&" + name_expressions[i] + ";\n";
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// lld keeps global state: one link at a time per process.
std::mutex g_link_mutex;

// The linker's arguments for `objects` (written as `object_paths`) into `output`; empty with a
// diagnostic when they cannot be made.
using LinkArguments = std::function<std::vector<std::string>(const std::vector<std::string>& object_paths, const std::string& output,
                                                             std::vector<Diagnostic>& diagnostics)>;
bool run_lld(const std::vector<ObjectFile>& objects, const std::string& label, const LinkArguments& arguments, std::string& out,
             std::vector<Diagnostic>& diagnostics, std::string& log);

// Links `objects` into one shared object: a host module (x86-64, with compiler-rt's builtins),
// or with `amdgpu` an AMD GPU code object (hsaco), which is a shared object of its own machine.
bool link_shared_object(const std::vector<ObjectFile>& objects, const std::string& label, std::string& out,
                        std::vector<Diagnostic>& diagnostics, std::string& log, bool amdgpu = false) {
  auto arguments = [&](const std::vector<std::string>& paths, const std::string& output, std::vector<Diagnostic>&) {
    // --exclude-libs keeps what comes from the builtins archive private to the module.
    std::vector<std::string> args = {"ld.lld", "-shared", "--hash-style=gnu", "-z", "noexecstack",
                                     "-z", "now", "--exclude-libs=ALL", "-o", output};
    if (amdgpu) args = {"ld.lld", "-shared", "-m", "elf64_amdgpu", "--no-undefined", "-o", output};
    args.insert(args.end(), paths.begin(), paths.end());
    if (std::string builtins = clang_builtins_path(); !amdgpu && ::access(builtins.c_str(), R_OK) == 0) args.push_back(builtins);
    return args;
  };
  return run_lld(objects, label, arguments, out, diagnostics, log);
}

// A host library's link as the Clang driver lays it out for `clang++ -shared -fuse-ld=lld`
// (the C runtime's start files, which define __dso_handle for static destructors; libstdc++,
// libm, libgcc, libc), with the library's own link flags after its objects, run by lld in-process.
bool link_host_library(const std::vector<ObjectFile>& objects, const CompileRequest& request, std::string& out,
                       std::vector<Diagnostic>& diagnostics, std::string& log) {
  auto arguments = [&](const std::vector<std::string>& paths, const std::string& output, std::vector<Diagnostic>& diags) {
    std::vector<std::string> driver_args = {clang_driver_path().c_str(), "-shared", "-fuse-ld=lld"};
    // Compile flags that change what is linked (OpenMP's runtime, threads).
    for (auto& f : request.flags)
      if (f.rfind("-fopenmp", 0) == 0 || f == "-pthread") driver_args.push_back(f);
    driver_args.insert(driver_args.end(), paths.begin(), paths.end());
    driver_args.insert(driver_args.end(), request.link_flags.begin(), request.link_flags.end());
    driver_args.insert(driver_args.end(), {"-o", output});
    std::vector<const char*> argv;
    for (auto& a : driver_args) argv.push_back(a.c_str());
    clang::DiagnosticOptions diag_options;
    std::string text;
    llvm::raw_string_ostream stream(text);
    clang::TextDiagnosticPrinter to_text(stream, diag_options);
    clang::DiagnosticsEngine engine(clang::DiagnosticIDs::create(), diag_options, &to_text, /*ShouldOwnClient=*/false);
    clang::driver::Driver driver(clang_driver_path().c_str(), k_host_triple, engine, "kiln");
    driver.setCheckInputsExist(false);
    std::unique_ptr<clang::driver::Compilation> compilation(driver.BuildCompilation(argv));
    std::vector<std::string> args;
    if (compilation && !engine.hasErrorOccurred())
      for (const auto& job : compilation->getJobs())
        if (llvm::StringRef(job.getCreator().getName()).contains("Link")) {
          args = {"ld.lld"};
          for (const char* a : job.getArguments()) args.emplace_back(a);
        }
    if (args.empty()) {
      stream.flush();
      diags.push_back({Diagnostic::Severity::kError, "", 0, 0,
                       "the link of " + request.label + " cannot be laid out" + (text.empty() ? "" : ": " + text)});
    }
    return args;
  };
  return run_lld(objects, request.label, arguments, out, diagnostics, log);
}

bool run_lld(const std::vector<ObjectFile>& objects, const std::string& label, const LinkArguments& arguments, std::string& out,
             std::vector<Diagnostic>& diagnostics, std::string& log) {
  // lld reads and writes real files; a private folder in RAM when there is one.
  std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  std::string pattern = base + "/kiln-link-XXXXXX";
  if (!mkdtemp(pattern.data())) {
    diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "cannot create a folder for linking in " + base});
    return false;
  }
  std::string dir = pattern;
  bool written = true;
  std::vector<std::string> paths;
  for (size_t i = 0; i < objects.size(); ++i) {
    std::string path = dir + "/" + std::to_string(i) + ".o";
    written = written && write_file_atomic(path, std::string_view(objects[i].bytes.data(), objects[i].bytes.size())).ok();
    paths.push_back(path);
  }
  std::vector<std::string> storage;
  if (written) storage = arguments(paths, dir + "/module.so", diagnostics);
  bool ok = false;
  if (written && !storage.empty()) {
    std::vector<const char*> argv;
    for (auto& s : storage) argv.push_back(s.c_str());
    std::string out_text, err_text;
    llvm::raw_string_ostream out_stream(out_text), err_stream(err_text);
    lld::Result result;
    {
      std::lock_guard lock(g_link_mutex);
      result = lld::lldMain(argv, out_stream, err_stream, {{lld::Gnu, &lld::elf::link}});
    }
    out_stream.flush();
    err_stream.flush();
    log += err_text;
    if (result.retCode == 0) {
      auto bytes = read_file(dir + "/module.so");
      if (bytes.ok()) {
        out = std::move(bytes).value();
        ok = true;
      }
    } else {
      // "ld.lld: error: undefined hidden symbol: f(int)" -> one diagnostic per line.
      std::string line;
      for (char c : err_text + "\n") {
        if (c != '\n') {
          line += c;
          continue;
        }
        if (auto pos = line.find("error: "); pos != std::string::npos)
          diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "link of " + label + ": " + line.substr(pos + 7)});
        line.clear();
      }
      if (diagnostics.empty()) diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "link of " + label + " failed"});
    }
  } else if (!written) {
    diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "cannot write object files to " + dir});
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ok;
}

// A host library's CUDA source into a host object (see CudaPass): the device passes, one thread
// per architecture; a cubin per "sm_" architecture from its own PTX by nvJitLink (each pass
// compiled with that architecture's __CUDA_ARCH__, as nvcc's -gencode does), the PTX of each
// "compute_" one; one fat binary of them; the host pass. What the compiler said goes into
// `consumer` (the host pass) and `part` (the device passes' diagnostics, without repeats, and
// their log when they failed or said something the host pass did not).
bool compile_cuda_unit(const SourceFile& source, const CompileRequest& request, CollectingConsumer& consumer, CompileResult& part,
                       ObjectFile& object) {
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
  auto device = [&](size_t i) {
    CudaPass pass{sms[i], {}};
    compiled[i] = compile_one(source, request, {}, Make::kCode, *consumers[i], passes[i], ptx[i], nullptr, &pass);
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) threads.emplace_back(device, i);
  device(0);
  for (auto& t : threads) t.join();
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
  CudaPass host{0, *fatbin};
  return compile_one(source, request, {}, Make::kCode, consumer, part, object, nullptr, &host);
}

class ClangToolchain final : public Toolchain {
 public:
  ClangToolchain() {
    // Only the targets kiln compiles for: a wheel links only their code (LLVM's static archives),
    // and a target registered here must be linked in. AsmParsers read inline assembly (NVPTX and
    // SPIR-V have none: their inline assembly passes through as text).
    LLVMInitializeX86TargetInfo(), LLVMInitializeX86Target(), LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter(), LLVMInitializeX86AsmParser();
    LLVMInitializeNVPTXTargetInfo(), LLVMInitializeNVPTXTarget(), LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    LLVMInitializeAMDGPUTargetInfo(), LLVMInitializeAMDGPUTarget(), LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUAsmPrinter(), LLVMInitializeAMDGPUAsmParser();
    LLVMInitializeSPIRVTargetInfo(), LLVMInitializeSPIRVTarget(), LLVMInitializeSPIRVTargetMC();
    LLVMInitializeSPIRVAsmPrinter();
  }

  std::string version() const override {
    return "clang " LLVM_VERSION_STRING " (in-process, lld; SPIR-V checked by " + spirv_tools_version() + ")";
  }

  CompileResult compile(const CompileRequest& request) override {
    if (request.output == CompileRequest::Output::kPrecompiledHeader) return compile_pch(request);
    if (request.language == "cuda") return compile_cuda(request);
    if (request.language == "hip") return compile_hip(request);
    if (request.language == "opencl") return compile_opencl(request);
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.kind = "host-so";
    if (request.language != "cpp") {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0,
                                    "the clang toolchain compiles language 'cpp' for cpu targets, not '" + request.language + "'"});
      return result;
    }
    // The sources compile side by side, one thread per core (a CompilerInstance per compile is
    // thread-safe, TOOLCHAIN-FACTS): a torch extension of three sources spends seconds in each.
    // Each keeps its own diagnostics and dependencies, merged in source order.
    const size_t n = request.sources.size();
    clang::DiagnosticOptions options;
    options.ShowColors = false;
    std::vector<std::unique_ptr<CollectingConsumer>> consumers;
    for (size_t i = 0; i < n; ++i) consumers.push_back(std::make_unique<CollectingConsumer>(options));
    std::vector<CompileResult> parts(n);
    std::vector<ObjectFile> objects(n);
    // A host library's C++ units generate code in parts (compile_host_split), on the threads its
    // sources leave idle (a lone torch extension source: all of them). Always split, whatever the
    // threads, so the library's bytes do not depend on the machine or KILN_COMPILE_THREADS: with
    // one thread the split costs no measurable CPU time (fused_norm.cpp, 3 runs each, this machine).
    std::vector<std::vector<ObjectFile>> split_objects(n);
    const unsigned cores = compile_threads(result);
    const unsigned codegen_threads = std::max<unsigned>(1, cores / static_cast<unsigned>(n));
    const bool split = request.host_library;
    std::vector<char> compiled(n, 0);
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) {
        const SourceFile& source = request.sources[i];
        if (auto prebuilt = request.prebuilt_objects.find(i); prebuilt != request.prebuilt_objects.end()) {
          objects[i].path = source.path;  // compiled by another compiler (nvcc): linked as it is
          objects[i].bytes.assign(prebuilt->second.begin(), prebuilt->second.end());
          compiled[i] = 1;
        } else if (request.host_library && is_cuda_source(source.path))
          compiled[i] = compile_cuda_unit(source, request, *consumers[i], parts[i], objects[i]);
        else if (split)
          compiled[i] = compile_host_split(source, i, request, pch_for(request, i), *consumers[i], parts[i], split_objects[i], codegen_threads);
        else
          compiled[i] = compile_one(source, request, pch_for(request, i), Make::kCode, *consumers[i], parts[i], objects[i]);
      }
    };
    size_t threads = std::min<size_t>(n, cores);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    bool ok = true;
    for (size_t i = 0; i < n; ++i) {
      ok = ok && compiled[i];
      if (!compiled[i]) result.failed_sources.push_back(i);
      // A CUDA source's device passes first (kept in its part), then what its host pass said.
      std::vector<Diagnostic> d = std::move(parts[i].diagnostics);
      std::set<std::string> seen;
      for (auto& x : d) seen.insert(x.to_string());
      for (auto& x : consumers[i]->take_diagnostics())
        if (seen.insert(x.to_string()).second) d.push_back(std::move(x));
      result.diagnostics.insert(result.diagnostics.end(), d.begin(), d.end());
      result.log += parts[i].log + consumers[i]->text();
      result.dependencies.insert(result.dependencies.end(), parts[i].dependencies.begin(), parts[i].dependencies.end());
      result.missing_files.insert(result.missing_files.end(), parts[i].missing_files.begin(), parts[i].missing_files.end());
      if (parts[i].headers_parsed) result.headers_parsed = result.headers_parsed.value_or(0) + *parts[i].headers_parsed;
    }
    if (split) {  // each unit's parts in its place, in order
      std::vector<ObjectFile> all;
      for (size_t i = 0; i < n; ++i) {
        if (split_objects[i].empty()) all.push_back(std::move(objects[i]));
        for (auto& part : split_objects[i]) all.push_back(std::move(part));
      }
      objects = std::move(all);
    }
    if (ok)
      ok = request.host_library ? link_host_library(objects, request, result.artifact, result.diagnostics, result.log)
                                : link_shared_object(objects, request.label, result.artifact, result.diagnostics, result.log);
    result.success = ok;
    if (!ok) result.artifact.clear();
    result.compile_ms = ms_since(start);
    return result;
  }

 private:
  // A precompiled header of sources[0] (an include prefix) with the request's options.
  CompileResult compile_pch(const CompileRequest& request) {
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.kind = "pch";
    clang::DiagnosticOptions options;
    options.ShowColors = false;
    CollectingConsumer consumer(options);
    ObjectFile pch;
    bool ok = request.sources.size() == 1 &&
              compile_one(request.sources.front(), request, {}, Make::kPrecompiledHeader, consumer, result, pch);
    result.diagnostics = consumer.take_diagnostics();
    result.log = consumer.text();
    if (ok) result.artifact.assign(pch.bytes.data(), pch.bytes.size());
    result.success = ok;
    result.compile_ms = ms_since(start);
    return result;
  }

  // The PTX of a CUDA op's sources (`first` standing in for sources[0]): one source compiled, or
  // several linked. Diagnostics and the log go into `result`.
  static bool compile_cuda_sources(const SourceFile& first, const CompileRequest& request, CompileResult& result,
                                   std::string& ptx) {
    clang::DiagnosticOptions options;
    options.ShowColors = false;
    CollectingConsumer consumer(options);
    bool ok;
    if (request.sources.size() == 1) {
      ObjectFile out;
      ok = compile_one(first, request, pch_for(request, 0), Make::kCode, consumer, result, out);
      ptx.assign(out.bytes.data(), out.bytes.size());
    } else {
      std::vector<SourceFile> sources = request.sources;
      sources.front() = first;
      ok = link_device_sources(sources, request, consumer, result, llvm::CodeGenFileType::AssemblyFile, nullptr, ptx);
    }
    collect_diagnostics(consumer, result);
    return ok;
  }

  // CUDA sources for an AMD GPU: each to LLVM IR through kiln's HIP prelude, linked, templated
  // entries resolved, one object emitted by the AMDGPU back end and linked by lld into a code
  // object (hsaco) that hipModuleLoadData takes. Needs no ROCm.
  CompileResult compile_hip(const CompileRequest& request) {
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.kind = "hsaco";
    std::vector<SourceFile> sources = request.sources;
    append_entry_references(sources.front(), request.name_expressions);
    // Each reference's initialiser is the kernel; the instance is kept, the reference dropped.
    auto resolve_entries = [&](llvm::Module& module, const llvm::DataLayout&, CompileResult& r) {
      for (size_t i = 0; i < request.name_expressions.size(); ++i) {
        llvm::GlobalVariable* ref = module.getGlobalVariable(entry_reference(i), true);
        auto* fn = ref && ref->hasInitializer() ? llvm::dyn_cast<llvm::Function>(ref->getInitializer()->stripPointerCasts()) : nullptr;
        if (!fn || fn->getCallingConv() != llvm::CallingConv::AMDGPU_KERNEL) {
          r.diagnostics.push_back({Diagnostic::Severity::kError, request.sources.front().path, 0, 0,
                                   "name expression '" + request.name_expressions[i] + "' names no kernel"});
          return false;
        }
        r.lowered_names.emplace_back(request.name_expressions[i], fn->getName().str());
        fn->setLinkage(llvm::GlobalValue::ExternalLinkage);  // an instance must outlive its reference
        fn->setVisibility(llvm::GlobalValue::ProtectedVisibility);
        ref->eraseFromParent();
      }
      return true;
    };
    clang::DiagnosticOptions options;
    options.ShowColors = false;
    CollectingConsumer consumer(options);
    std::vector<ObjectFile> objects(1);
    std::string object;
    bool ok = link_device_sources(sources, request, consumer, result, llvm::CodeGenFileType::ObjectFile, resolve_entries, object);
    collect_diagnostics(consumer, result);
    if (ok) {
      objects[0].path = request.sources.front().path;
      objects[0].bytes.assign(object.begin(), object.end());
      ok = link_shared_object(objects, request.label, result.artifact, result.diagnostics, result.log, /*amdgpu=*/true);
    }
    result.success = ok;
    if (!ok) result.artifact.clear();
    result.compile_ms = ms_since(start);
    return result;
  }

  // OpenCL C for any OpenCL device: SPIR-V from LLVM's back end, checked by SPIRV-Tools' validator,
  // and the preprocessed source for devices that take no IL; each kernel's parameter kinds as
  // the compiler laid them out. Target "spirv" keeps the SPIR-V alone.
  CompileResult compile_opencl(const CompileRequest& request) {
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    const bool spirv_only = request.target.rfind("spirv", 0) == 0;
    result.kind = spirv_only ? "spirv" : "opencl-program";
    auto done = [&]() {
      result.compile_ms = ms_since(start);
      return result;
    };
    if (request.sources.size() != 1) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, request.sources.empty() ? "" : request.sources[1].path, 0, 0,
                                    "an OpenCL op has one source file; put what its kernels share in headers it includes"});
      return done();
    }
    OpenClProgramImage image;
    // The op's flags (-cl-fast-relaxed-math, ...) reach the device's compiler too, not only Clang.
    image.build_options = "-cl-std=CL3.0";
    for (auto& flag : request.flags) image.build_options += " " + flag;
    auto read_kernels = [&](llvm::Module& module, const llvm::DataLayout& layout, CompileResult&) {
      for (llvm::Function& fn : module) {
        if (fn.isDeclaration() || fn.getCallingConv() != llvm::CallingConv::SPIR_KERNEL) continue;
        OpenClKernelInfo k;
        k.name = fn.getName().str();
        for (llvm::Argument& arg : fn.args()) {
          llvm::Type* type = arg.getType();
          char kind = k_opencl_value;
          if (type->isPointerTy()) {
            unsigned space = type->getPointerAddressSpace();
            kind = space == 3 ? k_opencl_local : space == 2 ? k_opencl_constant : k_opencl_global;
          }
          k.params += kind;
          k.value_sizes.push_back(type->isPointerTy() ? 8u : static_cast<uint32_t>(layout.getTypeAllocSize(type)));
        }
        image.kernels.push_back(std::move(k));
      }
      return true;
    };
    clang::DiagnosticOptions options;
    options.ShowColors = false;
    CollectingConsumer consumer(options);
    bool ok = link_device_sources(request.sources, request, consumer, result, llvm::CodeGenFileType::ObjectFile, read_kernels,
                                  image.spirv);
    if (ok) {
      Status valid = validate_spirv(image.spirv);
      if (!valid.ok()) {
        result.diagnostics.push_back({Diagnostic::Severity::kError, request.sources.front().path, 0, 0, valid.message()});
        ok = false;
      }
    }
    if (ok && !spirv_only) {
      // What was read to make the SPIR-V is already in result.dependencies; the same files again.
      CompileResult scratch;
      ObjectFile text;
      ok = compile_one(request.sources.front(), request, {}, Make::kPreprocessed, consumer, scratch, text);
      image.source.assign(text.bytes.data(), text.bytes.size());
    }
    collect_diagnostics(consumer, result);
    result.success = ok;
    if (ok) result.artifact = spirv_only ? image.spirv : encode_opencl_program(image);
    return done();
  }

  // CUDA through NVPTX: PTX for the oldest listed architecture, then a cubin per listed
  // architecture linked from it by nvJitLink. Needs no NVRTC.
  CompileResult compile_cuda(const CompileRequest& request) {
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.kind = "cuda-module";
    auto done = [&]() {
      result.compile_ms = ms_since(start);
      return result;
    };
    std::vector<int> archs = cuda_archs_in(request.target);
    if (archs.empty()) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "no architecture in target " + request.target});
      return done();
    }
    SourceFile source = request.sources.front();
    append_entry_references(source, request.name_expressions);
    CudaModuleImage image;
    image.ptx_sm = archs.front();
    bool ok = compile_cuda_sources(source, request, result, image.ptx);
    if (!ok && !request.cuda_toolkit_headers) {
      // Kiln's prelude lacks something the kernel uses: compile again against the toolkit's
      // headers. The prelude stays among the dependencies, so a prelude that later has it
      // changes the key, and the kernel is compiled again the fast way.
      CompileRequest with_toolkit = request;
      with_toolkit.cuda_toolkit_headers = true;
      with_toolkit.precompiled_headers.clear();  // made for the prelude
      std::vector<std::string> prelude_dependencies = std::move(result.dependencies);
      result = CompileResult{};
      result.kind = "cuda-module";
      ok = compile_cuda_sources(source, with_toolkit, result, image.ptx);
      result.dependencies.insert(result.dependencies.end(), prelude_dependencies.begin(), prelude_dependencies.end());
    }
    if (!ok) return done();
    for (size_t i = 0; i < request.name_expressions.size(); ++i) {
      auto symbol = take_entry_reference(image.ptx, entry_reference(i));
      if (!symbol) {
        result.diagnostics.push_back({Diagnostic::Severity::kError, request.sources.front().path, 0, 0,
                                      "name expression '" + request.name_expressions[i] + "' names no kernel"});
        return done();
      }
      result.lowered_names.emplace_back(request.name_expressions[i], *symbol);
    }
    auto cubins = cubins_for_target(image.ptx, request.target);
    if (!cubins.ok()) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, cubins.status().message()});
      return done();
    }
    image.cubins = std::move(cubins).value();
    // libdevice (read by the back end, not the preprocessor) is in the toolchain identity.
    result.artifact = encode_cuda_module(image);
    result.success = true;
    return done();
  }
};

}  // namespace
}  // namespace kiln::jit

extern "C" __attribute__((visibility("default"))) kiln::jit::Toolchain* kiln_jit_clang_toolchain() {
  static auto* toolchain = new kiln::jit::ClangToolchain;  // lives until exit, like LLVM's globals
  return toolchain;
}
