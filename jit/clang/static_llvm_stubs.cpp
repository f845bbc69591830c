// Linked into the toolchain library only when LLVM is linked statically (a wheel, KILN_STATIC_LLVM).
// LLVM's static archives call two kinds of function kiln leaves out on purpose:
// - lld's LTO and LLVM's LTO library register every target LLVM was configured with
//   (InitializeAllTargets): the targets kiln does not compile for (KILN_LLVM_STUBBED_TARGETS, set
//   by jit/CMakeLists.txt) get empty initialisers here, so they are simply never registered and
//   their code, most of a libLLVM, stays out of the wheel;
// - Debian's LLVM links Polly's pass plugin into its tools (llvm/Support/Extension.def), which
//   clang's back end and the PassBuilder ask for: here a plugin that registers nothing.
#include <llvm/Plugins/PassPlugin.h>

#define KILN_EMPTY_INITIALISER(target, part) \
  extern "C" void LLVMInitialize##target##part() {}
#define KILN_STUB_TARGET(target)                   \
  KILN_EMPTY_INITIALISER(target, TargetInfo)       \
  KILN_EMPTY_INITIALISER(target, Target)           \
  KILN_EMPTY_INITIALISER(target, TargetMC)         \
  KILN_EMPTY_INITIALISER(target, AsmPrinter)       \
  KILN_EMPTY_INITIALISER(target, AsmParser)        \
  KILN_EMPTY_INITIALISER(target, Disassembler)     \
  KILN_EMPTY_INITIALISER(target, TargetMCA)

#include "static_llvm_stubbed_targets.inc"  // KILN_STUB_TARGET(AArch64) ... (generated)

llvm::PassPluginLibraryInfo getPollyPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "Polly (not linked into kiln)", "0", [](llvm::PassBuilder&) {}};
}
