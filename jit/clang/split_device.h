// The in-process Clang toolchain's split device pass: one CUDA device pass (a host library's .cu
// source, one architecture) optimised and turned into PTX in parts, side by side.
//
// Why: a template-heavy source's device pass is one long thread. causal-conv1d's
// causal_conv1d_bwd.cu instantiates 1,080 kernels; its sm_90 pass took 164 s of CPU, 3% in the
// front end and the rest in LLVM's -O3 pipeline (56%) and NVPTX's code generation (41%), one
// function at a time, while the library's other sources were long done (-ftime-trace through
// KILN_TIME_TRACE, 2026-11-29, this machine). nvcc's cicc took the same 163 s for it; ninja hides
// that by running the other sources beside it, but nothing runs beside the last of them.
//
// How: Clang's front end makes the unit's module once, unoptimised (its code generation at -O3,
// the IR an -O3 compile starts its pipeline from). Its kernels are grouped so that what must exist
// once stays together (a kernel with the device variables it uses, kernels that share such a
// variable, a kernel whose address another takes); each group takes with it a copy of every
// function and read-only local constant it reaches, the copies made internal to their part. The
// groups are dealt out to k_device_partitions parts, heaviest first (instructions reached), and
// each part runs Clang's own back end (the -O3 pipeline, then NVPTX) in an LLVM context of its own
// on a thread of its own, holding a job slot. What no kernel reaches goes to the first part. Each
// kernel is optimised exactly as in the whole module: it was inlined into nothing else, and what it
// inlines is in its part. In the same job, the toolkit's ptxas (cuda_ptxas_path()) compiles the
// part's PTX into a relocatable cubin as soon as it is made, and nvJitLink only links the parts
// (link_relocatable_cubins, 0.2 s), their internal functions private to each: ptxas runs beside the
// other parts' LLVM work instead of after all of it, and cost 133 s of CPU on causal_conv1d_bwd.cu's
// four parts where nvJitLink's own ptxas took 161-176 s on the same PTX whole (this machine,
// 2026-11-29). Without a ptxas, nvJitLink compiles and links the parts' PTX (link_cubin_parts).
// The number of parts is fixed, not the threads, so the cubin's bytes do not depend on the machine.
//
// A module with fewer than two groups (or with aliases, ifuncs) is not split: one part.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jit/clang/compile_unit.h"

namespace kiln::jit::stages {

inline constexpr unsigned k_device_partitions = 4;

// The device pass `pass` of `source` (pch: its PCH, or empty) as PTX parts, in `ptx` (one or
// more; each a whole PTX module), and, where the toolkit has a ptxas and there are several parts,
// each part's relocatable cubin in `objects` (else `objects` is empty). Diagnostics go to
// `consumer`; dependencies and missing files into `result`.
bool compile_device_split(const SourceFile& source, const CompileRequest& request, std::string_view pch,
                          const CudaPass& pass, CollectingConsumer& consumer, CompileResult& result,
                          std::vector<std::string>& ptx, std::vector<std::string>& objects);

}  // namespace kiln::jit::stages
