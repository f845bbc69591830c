// The in-process Clang toolchain's frontend actions beyond Clang's own: the precompiled-header
// actions (what a PCH keeps for CUDA and for C++) and preprocessing into a stream of kiln's.
// Private to the in-process Clang toolchain (jit/clang/): included by its stages' translation units.
#pragma once

#include <memory>
#include <set>
#include <vector>

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/Attr.h>
#include <clang/AST/Decl.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendActions.h>
#include <clang/Frontend/MultiplexConsumer.h>
#include <clang/Frontend/Utils.h>
#include <clang/Lex/Preprocessor.h>
#include <clang/Lex/PreprocessorOptions.h>
#include <clang/Sema/Scope.h>
#include <clang/Sema/Sema.h>
#include <clang/Sema/SemaConsumer.h>

namespace kiln::jit::stages {

// A consumer that sees Sema at the end of a PCH's prefix, before the PCH writer (the next
// consumer) writes what Sema holds: what it changes there is what the PCH keeps.
class BeforePchWriter : public clang::SemaConsumer {
 public:
  void InitializeSema(clang::Sema& sema) override { m_sema = &sema; }
  void ForgetSema() override { m_sema = nullptr; }

 protected:
  clang::Sema* m_sema = nullptr;
};

// Clang's `Action` with each of `Before` (ASTConsumers), in order, ahead of its own consumer:
// they see each declaration, and the end of the unit, before it does.
template <typename Action, typename... Before>
class WithConsumersBefore final : public Action {
 public:
  using Action::Action;

 private:
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& ci, llvm::StringRef in_file) override {
    auto own = Action::CreateASTConsumer(ci, in_file);
    if (!own) return nullptr;
    std::vector<std::unique_ptr<clang::ASTConsumer>> consumers;
    (consumers.push_back(std::make_unique<Before>()), ...);
    consumers.push_back(std::move(own));
    return std::make_unique<clang::MultiplexConsumer>(std::move(consumers));
  }
};

// Clang's PCH action with each of `Prepare` (BeforePchWriters), in order, ahead of its writer.
template <typename... Prepare>
using GeneratePchAfter = WithConsumersBefore<clang::GeneratePCHAction, Prepare...>;

// For CUDA: without two lists of its headers' declarations that every compile using the PCH
// reads whole at its end, deserializing each: the functions Clang checks for "deferred
// diagnostics" (errors that count only in code generated for the device), 40% of reduce_sum's
// compile with CUB's PCH (perf, clang++-22 -include-pch, this machine), and the unused static
// functions and variables it would warn about, 11% of what was left. Neither finds anything in a
// PCH's headers: a PCH does not carry their deferred diagnostics (a __host__ __device__ header
// function that calls a host function is an error without a PCH and none with one, list or not:
// checked with clang++-22 -emit-pch), and the toolkit's headers are system headers, whose unused
// declarations Clang does not warn about. What the compile itself defines and instantiates is
// still checked.
class ForgetEndOfUnitChecks final : public BeforePchWriter {
 public:
  void HandleTranslationUnit(clang::ASTContext&) override {
    if (!m_sema) return;
    m_sema->DeclsToCheckForDeferredDiags.clear();
    m_sema->UnusedFileScopedDecls.erase(m_sema->UnusedFileScopedDecls.begin(nullptr, /*LocalOnly=*/true),
                                        m_sema->UnusedFileScopedDecls.end());
  }
};

// For C++: with what the vtables its headers use need. Clang instantiates a PCH's pending
// templates at its end (PCHInstantiateTemplates), but not the virtual members of the class
// templates whose vtables the headers use: those are found by DefineUsedVTables at the end of
// each compile that uses the PCH, and instantiated there, every time. With torch/extension.h
// that is ~2,200 functions (torch::nn's modules' clone and pretty_print, what they call): 1.15 s
// of a 1.8 s compile of a source that uses nothing of torch (-ftime-trace, clang++-22, torch
// 1.13, this machine). Here they are instantiated once, in the PCH. The vtable uses themselves
// stay in the PCH, with those found meanwhile, in the order found: each compile still emits the
// vtables (linkonce_odr, as without a PCH), now from definitions it reads instead of making them.
class DefineUsedVTables final : public BeforePchWriter {
 public:
  void HandleVTable(clang::CXXRecordDecl* record) override {
    if (m_collecting && m_seen.insert(record).second) m_found.push_back(record);
  }
  void HandleTranslationUnit(clang::ASTContext&) override {
    if (!m_sema || m_sema->getDiagnostics().hasErrorOccurred()) return;
    std::vector<clang::Sema::VTableUse> uses(m_sema->VTableUses.begin(), m_sema->VTableUses.end());
    for (auto& [record, where] : uses) m_seen.insert(record);
    m_collecting = true;
    // Sema closed the unit's scope at the end of the prefix; instantiating can still declare
    // builtins in it (LazilyCreateBuiltin), so it gets one for the while.
    clang::Scope scope(nullptr, clang::Scope::DeclScope, m_sema->getDiagnostics());
    scope.setEntity(m_sema->getASTContext().getTranslationUnitDecl());
    m_sema->TUScope = &scope;
    // As the end of a compile does it: vtables, then what they made pending, until no vtable
    // is left. (Instantiations whose template has no definition yet stay pending, for the
    // compiles that may define it: PerformPendingInstantiations leaves them in the list.)
    while (m_sema->DefineUsedVTables()) m_sema->PerformPendingInstantiations();
    m_sema->TUScope = nullptr;
    m_collecting = false;
    for (auto* record : m_found) uses.emplace_back(record, record->getLocation());
    m_sema->VTableUses.assign(uses.begin(), uses.end());
  }

 private:
  bool m_collecting = false;
  std::vector<clang::CXXRecordDecl*> m_found;
  std::set<clang::CXXRecordDecl*> m_seen;
};

// A CUDA device pass without the bodies of the system headers' host-only functions: the device
// code never calls them, and parsing them is half of what torch's headers cost a device pass
// (multi_tensor_adam.cu for sm_90, clang++-22 -Xclang -skip-function-bodies: 12.8 s parsing
// everything, 6.2 s without any body; this machine). Kept: templates and what a template
// declares (instantiating them can launch a kernel, which the device must then compile),
// constexpr functions and those with a deduced return type (Sema keeps those itself), __device__,
// __global__ and __host__ __device__ functions, and everything outside system headers (the
// source's own code and its own headers, where a host function launches its kernels). What a
// skipped body would still have made the device compile (a non-template header function that
// launches a kernel template) the caller finds by comparing the kernels the host pass registers
// with those the device pass defined, and compiles again without skipping.
class SkipHostOnlyBodies final : public clang::ASTConsumer {
 public:
  void Initialize(clang::ASTContext& context) override { m_sources = &context.getSourceManager(); }
  bool shouldSkipFunctionBody(clang::Decl* decl) override {
    const clang::FunctionDecl* function = decl->getAsFunction();
    if (!function || !m_sources || function->isTemplated() || function->hasAttr<clang::CUDADeviceAttr>() ||
        function->hasAttr<clang::CUDAGlobalAttr>())
      return false;
    return m_sources->isInSystemHeader(m_sources->getExpansionLoc(function->getLocation()));
  }

 private:
  const clang::SourceManager* m_sources = nullptr;
};

// -E into a stream of ours (Clang's own action writes to the output file).
class PreprocessInto final : public clang::PreprocessorFrontendAction {
 public:
  explicit PreprocessInto(llvm::raw_ostream& out) : m_out(out) {}

 private:
  void ExecuteAction() override {
    clang::CompilerInstance& ci = getCompilerInstance();
    clang::DoPrintPreprocessedInput(ci.getPreprocessor(), &m_out, ci.getPreprocessorOutputOpts());
  }
  llvm::raw_ostream& m_out;
};

}  // namespace kiln::jit::stages
