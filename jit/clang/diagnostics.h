// The in-process Clang toolchain's diagnostics stage: every diagnostic Clang reports kept as data
// (file, line, column, severity, message) and as the text a compiler would have printed.
// Private to the in-process Clang toolchain (jit/clang/): included by its stages' translation units.
#pragma once

#include <string>
#include <vector>

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <llvm/Support/raw_ostream.h>

#include "jit/toolchain.h"

namespace kiln::jit::stages {

inline Diagnostic::Severity severity_of(clang::DiagnosticsEngine::Level level) {
  switch (level) {
    case clang::DiagnosticsEngine::Note:
    case clang::DiagnosticsEngine::Remark: return Diagnostic::Severity::kNote;
    case clang::DiagnosticsEngine::Warning: return Diagnostic::Severity::kWarning;
    case clang::DiagnosticsEngine::Fatal: return Diagnostic::Severity::kFatal;
    default: return Diagnostic::Severity::kError;
  }
}

// Keeps every diagnostic as data and, through a TextDiagnosticPrinter, as the text a
// compiler would have printed (with the source line and caret) for the log.
class CollectingConsumer final : public clang::DiagnosticConsumer {
 public:
  explicit CollectingConsumer(clang::DiagnosticOptions& options) : m_stream(m_text), m_printer(m_stream, options) {}

  void BeginSourceFile(const clang::LangOptions& lang, const clang::Preprocessor* pp) override {
    m_printer.BeginSourceFile(lang, pp);
  }
  void EndSourceFile() override { m_printer.EndSourceFile(); }

  void HandleDiagnostic(clang::DiagnosticsEngine::Level level, const clang::Diagnostic& info) override {
    clang::DiagnosticConsumer::HandleDiagnostic(level, info);
    m_printer.HandleDiagnostic(level, info);
    if (level == clang::DiagnosticsEngine::Ignored) return;
    Diagnostic d;
    d.severity = severity_of(level);
    llvm::SmallString<256> message;
    info.FormatDiagnostic(message);
    d.message = std::string(message.str());
    if (info.getLocation().isValid() && info.hasSourceManager()) {
      clang::PresumedLoc loc = info.getSourceManager().getPresumedLoc(info.getLocation());
      if (loc.isValid()) {
        d.file = loc.getFilename();
        d.line = loc.getLine();
        d.column = loc.getColumn();
      }
    }
    m_diagnostics.push_back(std::move(d));
  }

  std::vector<Diagnostic> take_diagnostics() { return std::move(m_diagnostics); }
  // An error of kiln's own (no source location), in the data and the text.
  void add_error(const std::string& message) {
    m_diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, message});
    m_stream << "error: " << message << "\n";
  }
  // What another consumer collected (one per thread), after what this one has.
  void absorb(CollectingConsumer& other) {
    for (auto& d : other.take_diagnostics()) m_diagnostics.push_back(std::move(d));
    m_stream << other.text();
  }
  // Forgets what was collected (a compile that is redone).
  void clear() {
    m_stream.flush();
    m_text.clear();
    m_diagnostics.clear();
  }
  std::string text() {
    m_stream.flush();
    return m_text;
  }

 private:
  std::string m_text;
  llvm::raw_string_ostream m_stream;
  clang::TextDiagnosticPrinter m_printer;
  std::vector<Diagnostic> m_diagnostics;
};

// The compiler's diagnostics first, then those kiln added (linking, validation); and its log.
inline void collect_diagnostics(CollectingConsumer& consumer, CompileResult& result) {
  std::vector<Diagnostic> diagnostics = consumer.take_diagnostics();
  diagnostics.insert(diagnostics.end(), result.diagnostics.begin(), result.diagnostics.end());
  result.diagnostics = std::move(diagnostics);
  result.log = consumer.text();
}

}  // namespace kiln::jit::stages
