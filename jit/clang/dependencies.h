// The in-process Clang toolchain's dependency stage: every file a compile read (what completes the
// cache key), the #includes that found nothing, and what the preprocessor parsed itself.
// Private to the in-process Clang toolchain (jit/clang/): included by its stages' translation units.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <clang/Frontend/Utils.h>
#include <clang/Lex/PPCallbacks.h>
#include <clang/Lex/Preprocessor.h>

namespace kiln::jit::stages {

// Records every file the preprocessor entered, system headers included: all of them can
// change the artifact, so all of them enter the cache key. An #include that found nothing is
// kept apart: it is not a file to hash, but it keeps a failure out of the cache.
class AllDependencies final : public clang::DependencyCollector {
 public:
  bool needSystemDependencies() override { return true; }
  bool sawDependency(llvm::StringRef file, bool from_module, bool is_system, bool is_module_file, bool is_missing) override {
    if (is_missing) {
      m_missing.push_back(file.str());
      return false;
    }
    return DependencyCollector::sawDependency(file, from_module, is_system, is_module_file, is_missing);
  }
  void attachToPreprocessor(clang::Preprocessor& pp) override {
    DependencyCollector::attachToPreprocessor(pp);
    pp.addPPCallbacks(std::make_unique<CountEntered>(pp.getSourceManager(), m_entered));
  }
  const std::vector<std::string>& missing() const { return m_missing; }
  // The files the preprocessor entered and read itself: not those a precompiled header stood
  // for, nor those an include guard let it skip (both still dependencies).
  const std::set<std::string>& entered() const { return m_entered; }

 private:
  class CountEntered final : public clang::PPCallbacks {
   public:
    CountEntered(const clang::SourceManager& sm, std::set<std::string>& entered) : m_sm(sm), m_entered(entered) {}
    void FileChanged(clang::SourceLocation loc, FileChangeReason reason, clang::SrcMgr::CharacteristicKind, clang::FileID) override {
      if (reason != EnterFile) return;
      if (auto file = m_sm.getFileEntryRefForID(m_sm.getFileID(m_sm.getExpansionLoc(loc)))) m_entered.insert(file->getName().str());
    }

   private:
    const clang::SourceManager& m_sm;
    std::set<std::string>& m_entered;
  };
  std::vector<std::string> m_missing;
  std::set<std::string> m_entered;
};

}  // namespace kiln::jit::stages
