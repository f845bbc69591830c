// Device sources linked into one module, and SPIR-V emission: see device_link.h.
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
#include "jit/clang/device_link.h"
#include "jit/nvrtc/nvjitlink.h"
#include "jit/spirv/spirv_validate.h"
#include "jit/toolchain.h"
#include "support/cuda_fatbin.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "support/opencl_program_format.h"
#include "support/subprocess.h"


namespace kiln::jit::stages {

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

}  // namespace kiln::jit::stages
