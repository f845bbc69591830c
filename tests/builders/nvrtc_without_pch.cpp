// An NVRTC as CUDA 12.0-12.7 ship it, for the tests: the real library (the file named by
// $KILN_TEST_REAL_NVRTC) behind the entry points kiln resolves, without the precompiled-header
// API of 12.8, and refusing the PCH options as those releases do (NVRTC_ERROR_INVALID_OPTION:
// a real NVRTC 12.6 answers -pch so). kiln loads it through KILN_NVRTC_LIBRARY.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace {

constexpr int k_invalid_option = 5;  // NVRTC_ERROR_INVALID_OPTION

void* real() {
  static void* handle = [] {
    const char* path = std::getenv("KILN_TEST_REAL_NVRTC");
    return path ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  }();
  return handle;
}

template <typename F>
F resolve(const char* name) {
  return real() ? reinterpret_cast<F>(::dlsym(real(), name)) : nullptr;
}

bool is_pch_option(const char* o) {
  for (const char* p : {"-pch", "--pch", "-create-pch", "--create-pch", "-use-pch", "--use-pch", "-pch-dir", "--pch-dir",
                        "-instantiate-templates-in-pch", "--instantiate-templates-in-pch"})
    if (std::strncmp(o, p, std::strlen(p)) == 0) return true;
  return false;
}

}  // namespace

// nvrtcVersion says 12.6; nvrtcCompileProgram refuses the PCH options; every other entry point
// of jit/nvrtc/nvrtc_symbols.def is the real one's (FORWARD below).
extern "C" __attribute__((visibility("default"))) int nvrtcVersion(int* major, int* minor) {
  *major = 12;
  *minor = 6;
  return 0;
}

extern "C" __attribute__((visibility("default"))) int nvrtcCompileProgram(void* prog, int n, const char* const* options) {
  for (int i = 0; i < n; ++i)
    if (is_pch_option(options[i])) return k_invalid_option;
  static auto f = resolve<int (*)(void*, int, const char* const*)>("nvrtcCompileProgram");
  return f ? f(prog, n, options) : k_invalid_option;
}

#define FORWARD(name, ret, params, args)                                   \
  extern "C" __attribute__((visibility("default"))) ret name params {     \
    static auto f = resolve<ret(*) params>(#name);                         \
    return f(args);                                                        \
  }
#define ARGS(...) __VA_ARGS__
FORWARD(nvrtcGetErrorString, const char*, (int r), ARGS(r))
FORWARD(nvrtcCreateProgram, int, (void** p, const char* s, const char* n, int h, const char* const* hs, const char* const* hn),
        ARGS(p, s, n, h, hs, hn))
FORWARD(nvrtcDestroyProgram, int, (void** p), ARGS(p))
FORWARD(nvrtcGetPTXSize, int, (void* p, size_t* s), ARGS(p, s))
FORWARD(nvrtcGetPTX, int, (void* p, char* b), ARGS(p, b))
FORWARD(nvrtcGetCUBINSize, int, (void* p, size_t* s), ARGS(p, s))
FORWARD(nvrtcGetCUBIN, int, (void* p, char* b), ARGS(p, b))
FORWARD(nvrtcGetLTOIRSize, int, (void* p, size_t* s), ARGS(p, s))
FORWARD(nvrtcGetLTOIR, int, (void* p, char* b), ARGS(p, b))
FORWARD(nvrtcGetProgramLogSize, int, (void* p, size_t* s), ARGS(p, s))
FORWARD(nvrtcGetProgramLog, int, (void* p, char* b), ARGS(p, b))
FORWARD(nvrtcAddNameExpression, int, (void* p, const char* e), ARGS(p, e))
FORWARD(nvrtcGetLoweredName, int, (void* p, const char* e, const char** l), ARGS(p, e, l))
