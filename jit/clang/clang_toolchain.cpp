// The in-process Clang toolchain: C++ kernel sources -> object code (Clang, LLVM 22) ->
// a shared object (lld), all inside the calling process; no compiler or linker is started.
//
// This file is the orchestration: which stages a request goes through, by language and output.
// The stages are files of their own beside it, named for what they do (as LLVM's ORC names its
// layers): compile_unit (one source through Clang's driver and CompilerInstance), split_codegen
// (a host unit's code generation in parts), cuda_fat_binary (a .cu source's device passes, cubins
// and fat binary, its host pass beside them), split_device (a device pass's optimisation, code
// generation and ptxas in parts), device_link (device sources as one module; SPIR-V through
// kiln-spirv), link (lld in-process), job_slots (how many of all these jobs the process runs at
// once); with diagnostics.h, dependencies.h, frontend_actions.h (the PCH actions) and
// cuda_compat.h, all in namespace kiln::jit::stages. They are built into
// libkiln_jit_clang.so, which builders load on the first cache miss.
//
// The pipeline follows TOOLCHAIN-FACTS.md: an in-memory copy of each source overlaid on the
// real file system -> clang::driver::Driver builds the job list (no subprocess) -> the
// arguments of the "clang" job (the cc1 line) -> CompilerInvocation -> CompilerInstance ->
// EmitObjAction into a memory buffer. Objects are then linked by lld::elf::link.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

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
#include "jit/clang/compile_unit.h"
#include "jit/clang/cuda_fat_binary.h"
#include "jit/clang/device_link.h"
#include "jit/clang/job_slots.h"
#include "jit/clang/link.h"
#include "jit/clang/split_codegen.h"
#include "jit/nvrtc/nvjitlink.h"
#include "jit/spirv/spirv_validate.h"
#include "jit/toolchain.h"
#include "support/cuda_fatbin.h"
#include "support/cuda_module_format.h"
#include "support/cpu_time.h"
#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "support/log.h"
#include "support/opencl_program_format.h"
#include "support/subprocess.h"

namespace kiln::jit {
namespace {

using namespace stages;

// How many jobs of this process may run at once (job_slots.h: $KILN_COMPILE_THREADS, else
// $MAX_JOBS, else the CPUs it may use); a variable set to something else is a warning in `result`.
unsigned compile_threads(CompileResult& result) {
  const JobLimit& limit = JobSlots::process().limit();
  if (!limit.warning.empty()) {
    const std::string message = limit.warning + "; using " + std::to_string(limit.jobs) + " (" + limit.source + ")";
    result.diagnostics.push_back({Diagnostic::Severity::kWarning, "", 0, 0, message});
    result.log += "warning: " + message + "\n";
  }
  return limit.jobs;
}

// The sources' indices, longest text first (ties in their order).
std::vector<size_t> largest_first(const std::vector<SourceFile>& sources) {
  std::vector<size_t> order(sources.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a].text.size() > sources[b].text.size(); });
  return order;
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
    // Every thread the compile runs on (its units' pool, a CUDA source's device passes, nvJitLink's
    // links) hands its CPU time to the thread that joins it: one measure here covers them all.
    int64_t cpu_start = work_cpu_us();
    CompileResult result = compile_request(request);
    result.cpu_ms = static_cast<double>(work_cpu_us() - cpu_start) / 1000.0;
    return result;
  }

 private:
  CompileResult compile_request(const CompileRequest& request) {
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
    // A host library's C++ units generate code in parts (compile_host_split), shared by all the
    // compile's threads: a thread whose sources are done generates another unit's parts (a lone
    // torch extension source: on every core). Always split, whatever the threads, so the library's
    // bytes do not depend on the machine or KILN_COMPILE_THREADS: with one thread the split costs
    // no measurable CPU time (fused_norm.cpp, 3 runs each, this machine).
    std::vector<std::vector<ObjectFile>> split_objects(n);
    const unsigned cores = compile_threads(result);
    const bool split = request.host_library;
    stages::SharedJobs codegen;
    std::atomic<size_t> unfinished{n};  // sources not yet compiled: the helpers wait for none
    std::vector<char> compiled(n, 0);
    // The longest sources start first, so that the last one to start is not the one that takes
    // longest (the quantizer's quant_reduce.cu, most of its build, was the last of its six sources to start).
    // Text size stands in for the work; each result keeps its source's place.
    const std::vector<size_t> order = largest_first(request.sources);
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k; (k = next.fetch_add(1)) < n;) {
        const size_t i = order[k];
        const SourceFile& source = request.sources[i];
        auto source_start = std::chrono::steady_clock::now();
        if (auto external = request.external_compiles.find(i); external != request.external_compiles.end()) {
          JobSlots::Held slot;  // another compiler's process (nvcc): one job, as ninja counts it
          parts[i] = external->second();
          compiled[i] = parts[i].success;
          objects[i].path = source.path;  // its object is linked as it is
          if (compiled[i]) objects[i].bytes.assign(parts[i].artifact.begin(), parts[i].artifact.end());
          parts[i].artifact.clear();
        } else if (request.host_library && is_cuda_source(source.path))
          compiled[i] = compile_cuda_unit(source, i, request, *consumers[i], parts[i], objects[i]);
        else if (split)
          compiled[i] = compile_host_split(source, i, request, pch_for(request, i), *consumers[i], parts[i], split_objects[i], codegen);
        else
          compiled[i] = compile_one(source, request, pch_for(request, i), Make::kCode, *consumers[i], parts[i], objects[i]);
        log_stage(source, "compiled", source_start);
        unfinished.fetch_sub(1);
        codegen.notify();
      }
      if (split) codegen.run_until([&] { return unfinished.load() == 0; });  // help the units still generating code
    };
    // A split library's threads also generate its units' parts; other compiles use a thread per source.
    size_t threads = std::min<size_t>(split ? n * stages::k_codegen_partitions : n, cores);
    HelperThreads pool;  // support/cpu_time.h
    for (size_t t = 1; t < threads; ++t) pool.start([&] { work(); });
    work();
    pool.join();
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
    JobSlots::Held link_slot;
    if (ok)
      ok = request.host_library ? link_host_library(objects, request, result.artifact, result.diagnostics, result.log)
                                : link_shared_object(objects, request.label, result.artifact, result.diagnostics, result.log);
    result.success = ok;
    if (!ok) result.artifact.clear();
    result.compile_ms = ms_since(start);
    if (log_enabled(LogLevel::kDebug)) {
      const JobSlots& slots = JobSlots::process();
      KILN_LOG_AT(kDebug, "compile", request.label + ": " + std::to_string(n) + " sources on " + std::to_string(threads) +
                                         " threads; the process's jobs: at most " + std::to_string(slots.peak()) + " at once so far, limit " +
                                         std::to_string(slots.limit().jobs) + " (" + slots.limit().source + ")");
    }
    return result;
  }

  // A precompiled header of sources[0] (an include prefix) with the request's options.
  CompileResult compile_pch(const CompileRequest& request) {
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.kind = "pch";
    clang::DiagnosticOptions options;
    options.ShowColors = false;
    CollectingConsumer consumer(options);
    ObjectFile pch;
    // One pass of a host library's CUDA source: parsed as that pass parses it.
    CudaPass pass{request.pch_cuda_pass, {}};
    bool ok = request.sources.size() == 1 && compile_one(request.sources.front(), request, {}, Make::kPrecompiledHeader, consumer,
                                                         result, pch, nullptr, request.pch_cuda_pass >= 0 ? &pass : nullptr);
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
