// The in-process Clang toolchain's link stage: objects into a shared object by lld, in-process
// (one link at a time: lld keeps global state).
#pragma once

#include <string>
#include <vector>

#include "jit/clang/compile_unit.h"

namespace kiln::jit::stages {

// Links `objects` into one shared object: a host module (x86-64, with compiler-rt's builtins),
// or with `amdgpu` an AMD GPU code object (hsaco), which is a shared object of its own machine.
bool link_shared_object(const std::vector<ObjectFile>& objects, const std::string& label, std::string& out,
                        std::vector<Diagnostic>& diagnostics, std::string& log, bool amdgpu = false);

// A host library's link as the Clang driver lays it out for `clang++ -shared -fuse-ld=lld`
// (the C runtime's start files, which define __dso_handle for static destructors; libstdc++,
// libm, libgcc, libc), with the library's own link flags after its objects, run by lld in-process.
bool link_host_library(const std::vector<ObjectFile>& objects, const CompileRequest& request, std::string& out,
                       std::vector<Diagnostic>& diagnostics, std::string& log);

}  // namespace kiln::jit::stages
