// kiln-spirv: LLVM IR (bitcode on stdin) -> SPIR-V (on stdout) by LLVM's SPIR-V back end, one
// module per process. LLVM 22's back end keeps module state in a static (llvm-project issue
// #160613, fixed after 22 by PR #160956): a second module emitted in the same process can come out
// with duplicate ids, which SPIRV-Tools' validator rejects. kiln parses, optimises and validates
// in-process and runs only this last step here. Not meant to be run by hand.
//   kiln-spirv TRIPLE CPU FEATURES
// The work is this function, inside the toolchain library; kiln-spirv (spirv_emit_main.cpp) loads
// the library and calls it, so kiln carries one copy of LLVM (a wheel links it statically).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>

#include "jit/toolchain.h"

extern "C" __attribute__((visibility("default"))) int kiln_spirv_emit_main(int argc, char** argv) {
  if (argc != 4 || ::isatty(0)) {
    std::fprintf(stderr, "kiln-spirv: kiln's SPIR-V emitter; kiln starts it with LLVM bitcode on its stdin\n");
    return 2;
  }
  LLVMInitializeSPIRVTargetInfo();
  LLVMInitializeSPIRVTarget();
  LLVMInitializeSPIRVTargetMC();
  LLVMInitializeSPIRVAsmPrinter();
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  llvm::LLVMContext context;
  auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(input, "kiln-module"), context);
  if (!module) {
    std::fprintf(stderr, "kiln-spirv: unreadable bitcode: %s\n", llvm::toString(module.takeError()).c_str());
    return 1;
  }
  llvm::Triple triple(argv[1]);
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) {
    std::fprintf(stderr, "kiln-spirv: no %s target in this LLVM: %s\n", argv[1], error.c_str());
    return 1;
  }
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, argv[2], argv[3], llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  (*module)->setDataLayout(machine->createDataLayout());
  llvm::SmallString<0> bytes;
  llvm::raw_svector_ostream stream(bytes);
  llvm::legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, stream, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    std::fprintf(stderr, "kiln-spirv: the SPIR-V back end cannot emit this module\n");
    return 1;
  }
  passes.run(**module);
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
