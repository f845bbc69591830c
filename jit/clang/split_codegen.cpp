// compile_host_split: see split_codegen.h.
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
#include "jit/clang/split_codegen.h"
#include "jit/clang/job_slots.h"
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

void SharedJobs::push(std::vector<std::function<void()>> jobs) {
  {
    std::lock_guard lock(m_mutex);
    for (auto& job : jobs) m_queue.push_back(std::move(job));
  }
  m_changed.notify_all();
}

void SharedJobs::notify() {
  { std::lock_guard lock(m_mutex); }  // a waiter between its check and its wait sees the change
  m_changed.notify_all();
}

void SharedJobs::run_until(const std::function<bool()>& done) {
  std::unique_lock lock(m_mutex);
  while (!done()) {
    if (m_queue.empty()) {
      m_changed.wait(lock);
      continue;
    }
    std::function<void()> job = std::move(m_queue.front());
    m_queue.pop_front();
    lock.unlock();
    job();
    lock.lock();
    m_changed.notify_all();  // a job ended: its producer may be done
  }
}

bool compile_host_split(const SourceFile& source, size_t unit_index, const CompileRequest& request, std::string_view pch,
                        CollectingConsumer& consumer, CompileResult& result, std::vector<ObjectFile>& objects,
                        SharedJobs& jobs) {
  auto stage_start = std::chrono::steady_clock::now();
  llvm::LLVMContext context;
  ModuleOut unit;
  unit.context = &context;
  ObjectFile unused;
  if (!compile_one(source, request, pch, Make::kModule, consumer, result, unused, &unit)) return false;
  log_stage(source, "parsed and optimised", stage_start);
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
  // Counted under no lock of ours: run_until reads it under the queue's lock, after each job ends.
  std::atomic<size_t> remaining{parts.size()};
  auto generate = [&](size_t i) {
    JobSlots::Held slot;
    llvm::LLVMContext own;
    auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(llvm::StringRef(parts[i].data(), parts[i].size()), "part"), own);
    if (!module) {
      consumers[i]->add_error("code generation part " + std::to_string(i) + " does not read back: " +
                              llvm::toString(module.takeError()));
      return;
    }
    clang::CompilerInstance instance(std::make_shared<clang::CompilerInvocation>(*unit.invocation));
    instance.getCodeGenOpts().DisableLLVMPasses = true;  // optimised already, as a whole
    instance.createDiagnostics(consumers[i].get(), /*ShouldOwnClient=*/false);
    objects[i].path = source.path;
    clang::emitBackendOutput(instance, instance.getCodeGenOpts(), data_layout, module->get(), clang::Backend_EmitObj,
                             llvm::vfs::getRealFileSystem(), std::make_unique<llvm::raw_svector_ostream>(objects[i].bytes));
    done[i] = !instance.getDiagnostics().hasErrorOccurred();
  };
  std::vector<std::function<void()>> own_jobs;
  for (size_t i = 0; i < parts.size(); ++i)
    own_jobs.push_back([&, i] {
      generate(i);
      remaining.fetch_sub(1);
    });
  jobs.push(std::move(own_jobs));
  // The jobs reference this frame: it is left only once all of them have run, on whatever thread.
  jobs.run_until([&] { return remaining.load() == 0; });
  log_stage(source, "code generated", stage_start);
  bool ok = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    ok = ok && done[i];
    consumer.absorb(*consumers[i]);
  }
  return ok;
}

}  // namespace kiln::jit::stages
