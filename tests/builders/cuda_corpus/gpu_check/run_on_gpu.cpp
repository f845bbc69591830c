// Runs Clang-compiled PTX of two corpus kernels on a GPU through the driver API (dlopen'ed, so it
// builds without the toolkit): every cache-hinted load/store overload (hints_<type>: p[6..11]
// must equal p[0..5]) and the llm.c-style layer norm against a CPU reference. Not part of the
// suite (no test may need a GPU). Made and run as (2026-11-26, an H200, driver 580.159.04: all
// 29 overloads and the layer norm passed, max |out - ref| 0.007 in bf16):
//   g++ -O1 -std=c++17 -static-libstdc++ -static-libgcc -o run_on_gpu run_on_gpu.cpp -ldl
//   clang++-22 -std=c++17 -x cuda --cuda-device-only --offload-arch=sm_90 --cuda-path=/usr/local/cuda \
//     -Wno-unknown-cuda-version -isystem /usr/local/cuda/include/cccl -D__CUDACC_VER_MAJOR__=13 \
//     -D__CUDACC_VER_MINOR__=0 -include <kiln's compat header, the text of jit/clang/cuda_compat_header.inc> \
//     -O3 -S ../cache_hints.cu -o cache_hints.ptx     (and llmc_layernorm.cu likewise)
//   ./run_on_gpu cache_hints.ptx llmc_layernorm.ptx
#include <dlfcn.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
typedef int CUresult; typedef int CUdevice; typedef void* CUcontext; typedef void* CUmodule; typedef void* CUfunction; typedef unsigned long long CUdeviceptr;
#define SYM(name, ...) static CUresult (*name)(__VA_ARGS__);
SYM(cuInit, unsigned) SYM(cuDeviceGet, CUdevice*, int) SYM(cuCtxCreate_v2, CUcontext*, unsigned, CUdevice)
SYM(cuModuleLoadData, CUmodule*, const void*) SYM(cuModuleGetFunction, CUfunction*, CUmodule, const char*)
SYM(cuMemAlloc_v2, CUdeviceptr*, size_t) SYM(cuMemcpyHtoD_v2, CUdeviceptr, const void*, size_t) SYM(cuMemcpyDtoH_v2, void*, CUdeviceptr, size_t)
SYM(cuLaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**)
SYM(cuCtxSynchronize) SYM(cuMemFree_v2, CUdeviceptr) SYM(cuDeviceComputeCapability, int*, int*, CUdevice)
static int failures = 0;
#define CK(x) do { CUresult r_ = (x); if (r_) { std::printf("FAIL %s = %d\n", #x, r_); ++failures; return; } } while (0)
static std::string slurp(const char* p) { std::ifstream f(p); std::stringstream s; s << f.rdbuf(); return s.str(); }
static uint16_t to_bf16(float f) { uint32_t u; std::memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return u >> 16; }
static float from_bf16(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; std::memcpy(&f, &u, 4); return f; }

static void hints(CUmodule m, const char* type, size_t size) {
  std::string name = std::string("hints_") + type;
  CUfunction fn; CK(cuModuleGetFunction(&fn, m, name.c_str()));
  std::vector<unsigned char> host(16 * size, 0), back(16 * size);
  for (size_t i = 0; i < 6 * size; ++i) host[i] = (unsigned char)(i * 37 + 11);
  CUdeviceptr d; CK(cuMemAlloc_v2(&d, host.size())); CK(cuMemcpyHtoD_v2(d, host.data(), host.size()));
  void* args[] = {&d};
  CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr)); CK(cuCtxSynchronize());
  CK(cuMemcpyDtoH_v2(back.data(), d, back.size())); cuMemFree_v2(d);
  bool ok = true;
  int src[6] = {0, 1, 2, 3, 4, 5}, dst[6] = {6, 7, 8, 9, 10, 11};
  for (int k = 0; k < 6; ++k) ok = ok && std::memcmp(&back[dst[k] * size], &host[src[k] * size], size) == 0;
  std::printf("%s %s (%zu bytes)\n", ok ? "PASS" : "FAIL", name.c_str(), size);
  failures += !ok;
}

static void layernorm(CUmodule m) {
  const int N = 8, C = 768;
  CUfunction fn; CK(cuModuleGetFunction(&fn, m, "llmc_layernorm"));
  std::vector<uint16_t> inp(N * C), w(C), b(C), out(N * C);
  uint32_t seed = 1;
  auto rnd = [&] { seed = seed * 1664525u + 1013904223u; return ((seed >> 8) & 0xffff) / 32768.0f - 1.0f; };
  for (auto& x : inp) x = to_bf16(3.0f * rnd() + 0.5f);
  for (auto& x : w) x = to_bf16(1.0f + 0.2f * rnd());
  for (auto& x : b) x = to_bf16(0.1f * rnd());
  CUdeviceptr dout, dmean, drstd, dinp, dw, db;
  CK(cuMemAlloc_v2(&dout, N * C * 2)); CK(cuMemAlloc_v2(&dmean, N * 4)); CK(cuMemAlloc_v2(&drstd, N * 4));
  CK(cuMemAlloc_v2(&dinp, N * C * 2)); CK(cuMemAlloc_v2(&dw, C * 2)); CK(cuMemAlloc_v2(&db, C * 2));
  CK(cuMemcpyHtoD_v2(dinp, inp.data(), N * C * 2)); CK(cuMemcpyHtoD_v2(dw, w.data(), C * 2)); CK(cuMemcpyHtoD_v2(db, b.data(), C * 2));
  int n = N, c = C;
  void* args[] = {&dout, &dmean, &drstd, &dinp, &dw, &db, &n, &c};
  CK(cuLaunchKernel(fn, (N + 7) / 8, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr)); CK(cuCtxSynchronize());
  std::vector<float> mean(N), rstd(N);
  CK(cuMemcpyDtoH_v2(out.data(), dout, N * C * 2)); CK(cuMemcpyDtoH_v2(mean.data(), dmean, N * 4)); CK(cuMemcpyDtoH_v2(rstd.data(), drstd, N * 4));
  double worst = 0, worst_stat = 0;
  for (int r = 0; r < N; ++r) {
    double s = 0, v = 0;
    for (int i = 0; i < C; ++i) s += from_bf16(inp[r * C + i]);
    double mu = s / C;
    for (int i = 0; i < C; ++i) { double d = from_bf16(inp[r * C + i]) - mu; v += d * d; }
    double rs = 1.0 / std::sqrt(v / C + 1e-5);
    worst_stat = std::fmax(worst_stat, std::fmax(std::fabs(mean[r] - mu), std::fabs(rstd[r] - rs) / rs));
    for (int i = 0; i < C; ++i) {
      double ref = (from_bf16(inp[r * C + i]) - mu) * rs * from_bf16(w[i]) + from_bf16(b[i]);
      worst = std::fmax(worst, std::fabs(from_bf16(out[r * C + i]) - ref));
    }
  }
  bool ok = worst < 0.05 && worst_stat < 1e-4;
  std::printf("%s llmc_layernorm: max |out - ref| %.4g (bf16), mean/rstd rel %.3g\n", ok ? "PASS" : "FAIL", worst, worst_stat);
  failures += !ok;
}

int main(int argc, char** argv) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { std::printf("FAIL no libcuda.so.1\n"); return 1; }
#define LOAD(name) name = (decltype(name))dlsym(lib, #name);
  LOAD(cuInit) LOAD(cuDeviceGet) LOAD(cuCtxCreate_v2) LOAD(cuModuleLoadData) LOAD(cuModuleGetFunction) LOAD(cuMemAlloc_v2)
  LOAD(cuMemcpyHtoD_v2) LOAD(cuMemcpyDtoH_v2) LOAD(cuLaunchKernel) LOAD(cuCtxSynchronize) LOAD(cuMemFree_v2) LOAD(cuDeviceComputeCapability)
  CUdevice dev; CUcontext ctx; int maj = 0, min = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate_v2(&ctx, 0, dev)) { std::printf("FAIL no CUDA device\n"); return 1; }
  cuDeviceComputeCapability(&maj, &min, dev);
  std::printf("device sm_%d%d\n", maj, min);
  std::string hints_ptx = slurp(argv[1]), ln_ptx = slurp(argv[2]);
  CUmodule mh, ml;
  if (cuModuleLoadData(&mh, hints_ptx.c_str()) || cuModuleLoadData(&ml, ln_ptx.c_str())) { std::printf("FAIL module load\n"); return 1; }
  struct { const char* t; size_t s; } types[] = {{"char", 1}, {"schar", 1}, {"uchar", 1}, {"short", 2}, {"ushort", 2}, {"int", 4}, {"uint", 4},
      {"long", 8}, {"llong", 8}, {"ullong", 8}, {"float", 4}, {"double", 8}, {"char2", 2}, {"char4", 4}, {"uchar4", 4}, {"short2", 4},
      {"ushort4", 8}, {"int2", 8}, {"int4", 16}, {"uint4", 16}, {"longlong2", 16}, {"ulonglong2", 16}, {"float2", 8}, {"float4", 16},
      {"double2", 16}, {"half1", 2}, {"__half2", 4}, {"bf16", 2}, {"bf162", 4}};
  for (auto& t : types) hints(mh, t.t, t.s);
  layernorm(ml);
  std::printf("%s: %d failures\n", failures ? "FAILED" : "ALL PASSED", failures);
  return failures != 0;
}
