// lld in-process: see link.h.
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
#include "jit/clang/link.h"
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

namespace kiln::jit::stages {

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
                        std::vector<Diagnostic>& diagnostics, std::string& log, bool amdgpu) {
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

}  // namespace kiln::jit::stages
