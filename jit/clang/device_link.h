// The in-process Clang toolchain's device-link stage: CUDA, HIP and OpenCL sources as one LLVM module,
// emitted as PTX, an AMDGPU object or SPIR-V (the last through kiln-spirv).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <llvm/IR/DataLayout.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/CodeGen.h>

#include "jit/clang/compile_unit.h"

namespace kiln::jit::stages {

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
                          CompileResult& result, std::string& out);

bool link_device_sources(const std::vector<SourceFile>& sources, const CompileRequest& request, CollectingConsumer& consumer,
                         CompileResult& result, llvm::CodeGenFileType type, const ModuleInspector& inspect, std::string& out);

}  // namespace kiln::jit::stages
