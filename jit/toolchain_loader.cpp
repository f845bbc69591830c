#include "jit/toolchain_loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "jit/nvrtc/nvjitlink.h"
#include "support/cuda_toolkit.h"
#include "support/elf_build_id.h"
#include "support/file_memo.h"
#include "support/file_util.h"
#include "support/hash.h"
#include "support/install_paths.h"

namespace kiln::jit {
namespace {

constexpr const char* k_library_name = "libkiln_jit_clang.so";

}  // namespace

std::string clang_toolchain_library_path() { return find_kiln_file(k_library_name, "KILN_JIT_LIBRARY", KILN_JIT_BUILD_PATH); }

bool clang_toolchain_present() {
  static const bool present = [] {
    std::string library = clang_toolchain_library_path();
    return !library.empty() && (KILN_STATIC_LLVM || !std::string(KILN_LIBCLANG_CPP_PATH).empty()) &&
           ::access(library.c_str(), R_OK) == 0;
  }();
  return present;
}

Result<std::string> clang_toolchain_identity() {
  static std::once_flag once;
  static Result<std::string> identity = not_found("");
  std::call_once(once, [] {
    // A node that only loads artifacts (no LLVM, like a GPU node) names the identity of the
    // toolchain that built them: `kiln toolchains` prints it on a node that compiles.
    if (const char* given = std::getenv("KILN_CLANG_IDENTITY"); given && *given) {
      identity = std::string(given);
      return;
    }
    std::string id = "clang-inproc;llvm=" KILN_LLVM_VERSION;
    // What compiles: kiln's driver code (its build id changes when it does), Clang and LLVM; in a
    // wheel all three are one library, whose build id covers what was linked into it.
    std::vector<std::string> files = {clang_toolchain_library_path()};
    if (!KILN_STATIC_LLVM) files.insert(files.end(), {KILN_LIBCLANG_CPP_PATH, KILN_LIBLLVM_PATH});
    for (const std::string& file : files) {
      if (file.empty()) {
        identity = unavailable("kiln was built without the Clang toolchain (KILN_WITH_CLANG=OFF)");
        return;
      }
      auto build_id = memo_elf_build_id(file);
      if (!build_id.ok()) {
        identity = unavailable("the Clang toolchain is not usable: " + build_id.status().message() +
                               " (set KILN_JIT_LIBRARY to libkiln_jit_clang.so, or rebuild kiln)");
        return;
      }
      id += ";" + file.substr(file.find_last_of('/') + 1) + "=" + build_id.value();
    }
    // Compiler-rt's builtins are linked into host artifacts (another package than libclang).
    auto builtins = memo_file_hash(clang_builtins_path());
    id += ";clang_rt.builtins=" + (builtins.ok() ? builtins->hex() : std::string("none"));
    identity = id;
  });
  return identity;
}

Result<std::string> clang_cuda_toolchain_identity() {
  static std::once_flag once;
  static Result<std::string> identity = not_found("");
  std::call_once(once, [] {
    auto clang = clang_toolchain_identity();
    if (!clang.ok()) {
      identity = clang.status();
      return;
    }
    // CUDA through Clang also links CUDA's libdevice into the PTX and makes cubins with
    // nvJitLink: both change the artifact, so both are in this identity (and only in this one).
    std::string id = clang.value() + ";cuda-via-clang" + nvjitlink_identity();
    std::string libdevice = cuda_toolkit_root() + "/nvvm/libdevice/libdevice.10.bc";
    if (auto hash = memo_file_hash(libdevice); hash.ok()) id += ";libdevice=" + hash->hex();
    // The toolkit's ptxas compiles a split device pass's parts (jit/clang/split_device.h).
    if (std::string ptxas = cuda_ptxas_path(); !ptxas.empty())
      if (auto hash = memo_file_hash(ptxas); hash.ok()) id += ";ptxas=" + hash->hex();
    identity = id;
  });
  return identity;
}

Result<std::string> clang_spirv_toolchain_identity() {
  static std::once_flag once;
  static Result<std::string> identity = not_found("");
  std::call_once(once, [] {
    // A node that only loads (no LLVM, no kiln-spirv) names it, as KILN_CLANG_IDENTITY does.
    if (const char* given = std::getenv("KILN_SPIRV_IDENTITY"); given && *given) {
      identity = std::string(given);
      return;
    }
    auto clang = clang_toolchain_identity();
    if (!clang.ok()) {
      identity = clang.status();
      return;
    }
    std::string helper = spirv_helper_path();
    auto build_id = memo_elf_build_id(helper);
    if (!build_id.ok()) {
      identity = unavailable("no SPIR-V emitter at " + helper + " (" + build_id.status().message() + "; set KILN_SPIRV_HELPER)");
      return;
    }
    identity = clang.value() + ";kiln-spirv=" + build_id.value();
  });
  return identity;
}

namespace {
std::once_flag g_load_once;
Toolchain* g_toolchain = nullptr;
Status g_load_status;
}  // namespace

Result<Toolchain*> load_clang_toolchain() {
  std::call_once(g_load_once, [] {
    std::string path = clang_toolchain_library_path();
    if (path.empty()) {
      g_load_status = unavailable("kiln was built without the Clang toolchain (KILN_WITH_CLANG=OFF); cpu targets cannot be compiled here");
      return;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = ::dlerror();
      g_load_status = unavailable(std::string("cannot load the Clang toolchain from ") + path + ": " +
                                  (err ? err : "dlopen failed") + " (set KILN_JIT_LIBRARY, or install llvm-22 and libclang-cpp22)");
      return;
    }
    auto* create = reinterpret_cast<Toolchain* (*)()>(::dlsym(handle, "kiln_jit_clang_toolchain"));
    if (!create) {
      g_load_status = unavailable(path + " does not export kiln_jit_clang_toolchain");
      return;
    }
    g_toolchain = create();
  });
  if (!g_toolchain) return g_load_status;
  return g_toolchain;
}

void start_loading_clang_toolchain() {
  static std::once_flag started;
  // Detached: whoever started it calls load_clang_toolchain() next, which waits in call_once
  // until this thread's load is done, so it never outlives the work that needs it.
  std::call_once(started, [] { std::thread([] { (void)load_clang_toolchain(); }).detach(); });
}

bool clang_toolchain_loaded() { return g_toolchain != nullptr; }

}  // namespace kiln::jit
