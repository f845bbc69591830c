// The bundled CUDA kernels run as written, without a GPU: each specs/cuda/*.cu source is compiled
// here by the host compiler against tests/builders/cuda_emulation/cuda_emulator.h (CUDA's
// threads, blocks, shared memory, barriers and warp shuffles, emulated) and launched over many
// sizes (odd tails, rows wider and narrower than a warp's share), tensor layouts (16-byte
// aligned, ending flush against a guard page so a read past the end faults, all shifted by an
// element, and not lined up with each other) and launches (the spec's [cuda] launch for 1, 4 and
// 132 SMs, the thread-per-element launch older callers make, odd grids and blocks). Every result
// is compared with the op's own reference function, compiled by kiln for the CPU from the spec,
// within the spec's tolerance (exactly, for the ops that promise the same bytes).
//
// The program is compiled with -fsanitize=alignment: a 128-bit load or store at an address the
// GPU would fault on stops it. What this cannot see: the device's math (tanhf, expf and __expf
// are the host's here), its memory system and its speed; tools/bench/gpu_sweep.py and the CUDA
// tests on a GPU (tests/python/test_cuda_ops.py) see those.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "builders/launch_shape.h"
#include "builders/ops.h"
#include "tests/builders/bundled_ops.h"
#include "tests/test_util.h"

// The kernels, each in a namespace of its own, after the emulator and the headers they share
// (included once here, so the kernels' own #includes of them are no-ops).
#include "tests/builders/cuda_emulation/cuda_emulator.h"
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cub/block/block_reduce.cuh>
#include "kiln_ops/cuda_common.cuh"

namespace emu_vector_add {
#include "specs/cuda/vector_add.cu"
}
namespace emu_axpby {
#include "specs/cuda/axpby.cu"
}
namespace emu_gelu {
#include "specs/cuda/gelu.cu"
}
namespace emu_adamw {
#include "specs/cuda/adamw.cu"
}
namespace emu_quantize {
#include "specs/cuda/quantize_int8.cu"
}
namespace emu_layer_norm {
#include "specs/cuda/layer_norm.cu"
}
namespace emu_row_softmax {
#include "specs/cuda/row_softmax.cu"
}
namespace emu_softmax_online {
#include "specs/cuda/softmax_online.cu"
}
namespace emu_reduce_sum {
#include "specs/cuda/reduce_sum.cu"
}
namespace emu_sum_reduce {
#include "specs/cuda/sum_reduce.cu"
}

namespace kiln::builders {
namespace {

// ---- tensors in "device memory": their end against a guard page, or at a chosen offset

constexpr int k_flush = -1;  // the tensor's last byte is the last before the guard page

// n elements of T whose first byte sits `offset` bytes past a 16-byte boundary (0..15), or whose
// last byte touches an inaccessible page (k_flush): an access past the end faults.
template <class T>
class Tensor {
 public:
  Tensor(size_t n, int offset) : m_n(n) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t bytes = n * sizeof(T);
    size_t pad = offset == k_flush ? 0 : (16 - (bytes + static_cast<size_t>(offset)) % 16) % 16;
    m_size = (bytes + pad + 16 + page - 1) / page * page + page;
    void* base = ::mmap(nullptr, m_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::runtime_error("mmap failed");
    m_base = static_cast<char*>(base);
    char* guard = m_base + m_size - page;
    ::mprotect(guard, page, PROT_NONE);
    m_data = reinterpret_cast<T*>(guard - pad - bytes);
    std::memset(m_data, 0xff, bytes);  // NaN for floats: an element a kernel leaves unwritten shows
  }
  ~Tensor() { ::munmap(m_base, m_size); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  T* data() { return m_data; }
  T& operator[](size_t i) { return m_data[i]; }
  size_t size() const { return m_n; }
  std::vector<T> copy() const { return std::vector<T>(m_data, m_data + m_n); }
  void assign(const std::vector<T>& v) { std::memcpy(m_data, v.data(), v.size() * sizeof(T)); }

 private:
  size_t m_n, m_size = 0;
  char* m_base = nullptr;
  T* m_data = nullptr;
};

// Where each of an op's tensors starts (bytes past a 16-byte boundary, or k_flush).
struct Layout {
  std::string name;
  std::function<int(size_t tensor, size_t element_size)> offset;
};

std::vector<Layout> layouts() {
  return {
      {"aligned", [](size_t, size_t) { return 0; }},
      {"flush against a guard page", [](size_t, size_t) { return k_flush; }},
      {"all shifted by an element", [](size_t, size_t size) { return static_cast<int>(size); }},
      {"not lined up (the first tensor shifted)", [](size_t tensor, size_t size) { return tensor == 0 ? static_cast<int>(size) : 0; }},
  };
}

struct Launch {
  dim3 grid, block;
  std::string str() const { return "grid " + std::to_string(grid.x) + " x block " + std::to_string(block.x); }
};

// ---- the ops' references, compiled by kiln for the CPU from their specs

class CudaEmulationTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    s_cache = new testing::TempDir();
    s_ops = testing::bundled_ops_on_cpu(s_cache->path()).release();
  }
  static void TearDownTestSuite() {
    delete s_ops;
    delete s_cache;
  }

  // The op's spec and its reference function; skips the test when this node cannot compile C++
  // for its own CPU (a GPU node built without Clang).
  struct Reference {
    OpSpec spec;
    std::shared_ptr<LoadedOp> op;
    runtime::Kernel* kernel = nullptr;
    // Runs the reference on pointers to each argument's value.
    void operator()(std::vector<const void*> args) const {
      runtime::Stream& stream = op->accelerator().default_stream();
      ASSERT_TRUE(kernel->launch(stream, runtime::LaunchConfig{}, args.data(), args.size()).ok());
      ASSERT_TRUE(stream.synchronize().ok());
    }
    double rtol() const { return spec.check->rtol; }
    double atol() const { return spec.check->atol; }
  };
  static std::string reference(const std::string& name, Reference& out) {
    auto spec = s_ops->find_spec(name);
    if (!spec.ok()) return spec.status().message();
    out.spec = *spec;
    auto op = s_ops->get(name);
    if (!op.ok()) return "the CPU reference of " + name + " does not build here: " + op.status().message();
    out.op = *op;
    auto kernel = out.op->kernel(out.spec.check->reference);
    if (!kernel.ok()) return kernel.status().message();
    out.kernel = *kernel;
    return "";
  }

  // The spec's CUDA launch for these sizes on GPUs of 1, 4 and 132 SMs, then the launches
  // `extra` lists (callers' own: a thread per element, odd grids and blocks).
  static std::vector<Launch> launches(const OpSpec& spec, const std::map<std::string, int64_t>& sizes, std::vector<Launch> extra) {
    std::vector<Launch> out;
    for (int sm : {1, 4, 132}) {
      auto shape = spec_launch(spec, "cuda", sm, sizes);
      EXPECT_TRUE(shape.ok()) << shape.status().message();
      if (shape.ok()) out.push_back({{shape->config.grid.x, 1, 1}, {shape->config.block.x, 1, 1}});
    }
    for (auto& l : extra) out.push_back(l);
    return out;
  }

  static testing::TempDir* s_cache;
  static Ops* s_ops;
};
testing::TempDir* CudaEmulationTest::s_cache = nullptr;
Ops* CudaEmulationTest::s_ops = nullptr;

#define KILN_REFERENCE(name, ref)                                  \
  Reference ref;                                                   \
  if (std::string why = reference(name, ref); !why.empty()) GTEST_SKIP() << why;

// Every element of `got` within the spec's tolerance of `want`; the first that is not, with where.
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<T>& want, double rtol, double atol, const std::string& context) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double g, w;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      g = __bfloat162float(got[i]);
      w = __bfloat162float(want[i]);
    } else {
      g = static_cast<double>(got[i]);
      w = static_cast<double>(want[i]);
    }
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ADD_FAILURE() << context << ": element " << i << " of " << got.size() << " is " << g << ", the reference " << w << " (atol "
                    << atol << ", rtol " << rtol << ")";
      return;
    }
  }
}

std::vector<float> random_floats(size_t n, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Runs a launch in the emulator; a GPU fault or hang shows as a test failure naming it.
template <class... Params, class... Args>
bool run(const Launch& l, const std::string& name, void (*kernel)(Params...), Args... args) {
  try {
    emu::launch(l.grid, l.block, name, kernel, args...);
    return true;
  } catch (const emu::EmulationError& e) {
    ADD_FAILURE() << e.what();
    return false;
  }
}

const std::vector<size_t> k_sizes = {1, 2, 3, 4, 5, 7, 8, 13, 31, 64, 255, 1000, 4099};

// ---- elementwise ops

TEST_F(CudaEmulationTest, VectorAddIsExactForEverySizeLayoutAndLaunch) {
  KILN_REFERENCE("vector_add", ref);
  for (size_t n : k_sizes)
    for (auto& layout : layouts())
      for (auto& l : launches(ref.spec, {{"n", int64_t(n)}}, {{{unsigned((n + 255) / 256)}, {256}}, {{3}, {96}}, {{2}, {33}}, {{1}, {1}}})) {
        Tensor<float> a(n, layout.offset(0, 4)), b(n, layout.offset(1, 4)), out(n, layout.offset(2, 4));
        a.assign(random_floats(n, -1, 1, n));
        b.assign(random_floats(n, -1, 1, n + 1));
        std::vector<float> want(n, 0.f);
        int64_t count = static_cast<int64_t>(n);
        const float *pa = a.data(), *pb = b.data();
        float* pw = want.data();
        ref({&pa, &pb, &pw, &count});
        if (!run(l, "vector_add", emu_vector_add::vector_add, a.data(), b.data(), out.data(), static_cast<long long>(n))) return;
        expect_close(out.copy(), want, 0, 0, "vector_add n=" + std::to_string(n) + ", " + layout.name + ", " + l.str());
      }
}

TEST_F(CudaEmulationTest, AxpbyForEverySizeLayoutAndLaunch) {
  KILN_REFERENCE("axpby", ref);
  for (size_t n : k_sizes)
    for (auto& layout : layouts())
      for (auto& l : launches(ref.spec, {{"n", int64_t(n)}}, {{{unsigned((n + 255) / 256)}, {256}}, {{2}, {33}}, {{1}, {1}}})) {
        Tensor<float> x(n, layout.offset(0, 4)), y(n, layout.offset(1, 4));
        x.assign(random_floats(n, -1, 1, n));
        y.assign(random_floats(n, -1, 1, n + 1));
        std::vector<float> want = y.copy();
        float alpha = 2.5f, beta = -0.75f;
        int64_t count = static_cast<int64_t>(n);
        const float* px = x.data();
        float* pw = want.data();
        ref({&alpha, &px, &beta, &pw, &count});
        if (!run(l, "axpby", emu_axpby::axpby, alpha, x.data(), beta, y.data(), static_cast<long long>(n))) return;
        expect_close(y.copy(), want, ref.rtol(), ref.atol(), "axpby n=" + std::to_string(n) + ", " + layout.name + ", " + l.str());
      }
}

std::vector<__nv_bfloat16> random_bf16(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<__nv_bfloat16> out;
  for (float f : random_floats(n, lo, hi, seed)) out.push_back(__float2bfloat16(f));
  return out;
}
std::vector<float> random_of(float, size_t n, float lo, float hi, uint64_t seed) { return random_floats(n, lo, hi, seed); }
std::vector<__nv_bfloat16> random_of(__nv_bfloat16, size_t n, float lo, float hi, uint64_t seed) { return random_bf16(n, lo, hi, seed); }

// gelu<float> or gelu<__nv_bfloat16> against the op's reference.
template <class T>
void check_gelu(const CudaEmulationTest::Reference& ref, const std::string& op, std::vector<Launch> (*launches_for)(const OpSpec&, size_t)) {
  for (size_t n : k_sizes)
    for (auto& layout : layouts())
      for (auto& l : launches_for(ref.spec, n)) {
        Tensor<T> x(n, layout.offset(0, sizeof(T))), y(n, layout.offset(1, sizeof(T)));
        x.assign(random_of(T(), n, -6, 6, n));
        std::vector<T> want(n, T());
        int64_t count = static_cast<int64_t>(n);
        const T* px = x.data();
        T* pw = want.data();
        ref({&px, &pw, &count});
        if (!run(l, op, emu_gelu::gelu<T>, static_cast<const T*>(x.data()), y.data(), static_cast<long long>(n))) return;
        expect_close(y.copy(), want, ref.rtol(), ref.atol(), op + " n=" + std::to_string(n) + ", " + layout.name + ", " + l.str());
      }
}

std::vector<Launch> gelu_launches(const OpSpec& spec, size_t n) {
  return CudaEmulationTest::launches(spec, {{"n", int64_t(n)}}, {{{unsigned((n + 255) / 256)}, {256}}, {{2}, {33}}});
}

TEST_F(CudaEmulationTest, GeluInFp32AndBf16ForEverySizeLayoutAndLaunch) {
  {
    KILN_REFERENCE("gelu", ref);
    check_gelu<float>(ref, "gelu", gelu_launches);
  }
  KILN_REFERENCE("gelu_bf16", ref);
  check_gelu<__nv_bfloat16>(ref, "gelu_bf16", gelu_launches);
}

// One AdamW step with fp32 or bf16 gradients: p, m and v against the reference's.
TEST_F(CudaEmulationTest, AdamwWithFp32AndBf16GradientsForEverySizeLayoutAndLaunch) {
  for (const std::string op : {"adamw", "adamw_bf16"}) {
    KILN_REFERENCE(op, ref);
    const bool bf16 = op == "adamw_bf16";
    for (size_t n : k_sizes)
      for (auto& layout : layouts())
        for (auto& l : launches(ref.spec, {{"n", int64_t(n)}}, {{{unsigned((n + 255) / 256)}, {256}}, {{2}, {33}}})) {
          const size_t grad_size = bf16 ? 2 : 4;
          Tensor<float> p(n, layout.offset(0, 4)), m(n, layout.offset(2, 4)), v(n, layout.offset(3, 4));
          Tensor<float> g32(n, layout.offset(1, grad_size));
          Tensor<__nv_bfloat16> g16(n, layout.offset(1, grad_size));
          p.assign(random_floats(n, -1, 1, n));
          m.assign(random_floats(n, -0.1f, 0.1f, n + 1));
          v.assign(random_floats(n, 0, 0.01f, n + 2));
          if (bf16) g16.assign(random_bf16(n, -1, 1, n + 3));
          else g32.assign(random_floats(n, -1, 1, n + 3));
          std::vector<float> want_p = p.copy(), want_m = m.copy(), want_v = v.copy();
          float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, decay = 0.01f;
          int64_t step = 3, count = static_cast<int64_t>(n);
          float *pp = want_p.data(), *pm = want_m.data(), *pv = want_v.data();
          const void* pg = bf16 ? static_cast<const void*>(g16.data()) : static_cast<const void*>(g32.data());
          ref({&pp, &pg, &pm, &pv, &lr, &beta1, &beta2, &eps, &decay, &step, &count});
          bool ok = bf16 ? run(l, op, emu_adamw::adamw_step<__nv_bfloat16>, p.data(), static_cast<const __nv_bfloat16*>(g16.data()), m.data(),
                               v.data(), lr, beta1, beta2, eps, decay, 3LL, static_cast<long long>(n))
                         : run(l, op, emu_adamw::adamw_step<float>, p.data(), static_cast<const float*>(g32.data()), m.data(), v.data(), lr,
                               beta1, beta2, eps, decay, 3LL, static_cast<long long>(n));
          if (!ok) return;
          const std::string context = op + " n=" + std::to_string(n) + ", " + layout.name + ", " + l.str();
          expect_close(p.copy(), want_p, ref.rtol(), ref.atol(), context + ", p");
          expect_close(m.copy(), want_m, ref.rtol(), ref.atol(), context + ", m");
          expect_close(v.copy(), want_v, ref.rtol(), ref.atol(), context + ", v");
        }
  }
}

// ---- int8 quantisation: the same bytes as the reference, for groups a lane, a warp and more

TEST_F(CudaEmulationTest, QuantizeAndDequantizeAreExactForEveryGroupSizeLayoutAndLaunch) {
  KILN_REFERENCE("quantize_int8", quantize);
  KILN_REFERENCE("dequantize_int8", dequantize);
  for (size_t n : {size_t{1}, size_t{7}, size_t{128}, size_t{129}, size_t{1000}, size_t{4099}})
    for (int64_t group : {1, 3, 4, 32, 100, 128, 512, 2048})
      for (auto& layout : layouts()) {
        const size_t groups = (n + group - 1) / group;
        for (auto& l : launches(quantize.spec, {{"n", int64_t(n)}, {"group", group}},
                                {{{unsigned((n + group * 8 - 1) / (group * 8))}, {256}}, {{1}, {32}}, {{5}, {64}}})) {
          const std::string context = "n=" + std::to_string(n) + ", group " + std::to_string(group) + ", " + layout.name + ", " + l.str();
          Tensor<float> x(n, layout.offset(0, 4)), scales(groups, layout.offset(2, 4)), y(n, layout.offset(2, 4));
          Tensor<signed char> q(n, layout.offset(1, 1));
          x.assign(random_floats(n, -3, 3, n + group));
          std::vector<int8_t> want_q(n, 0);
          std::vector<float> want_scales(groups, 0.f), want_y(n, 0.f);
          int64_t count = static_cast<int64_t>(n);
          const float* px = x.data();
          int8_t* pq = want_q.data();
          float* ps = want_scales.data();
          quantize({&px, &pq, &ps, &count, &group});
          if (!run(l, "quantize_int8", emu_quantize::quantize_int8, x.data(), q.data(), scales.data(), static_cast<long long>(n),
                   static_cast<long long>(group)))
            return;
          std::vector<int8_t> got_q(q.data(), q.data() + n);
          expect_close(got_q, want_q, 0, 0, "quantize_int8 " + context + ", q");
          expect_close(scales.copy(), want_scales, 0, 0, "quantize_int8 " + context + ", scales");
          // Dequantised from the reference's bytes, through tensors laid out the same way.
          std::memcpy(q.data(), want_q.data(), n);
          scales.assign(want_scales);
          const int8_t* cq = want_q.data();
          const float* cs = want_scales.data();
          float* pw = want_y.data();
          dequantize({&cq, &cs, &pw, &count, &group});
          for (auto& dl : launches(dequantize.spec, {{"n", int64_t(n)}, {"group", group}}, {{{1}, {1024}}})) {
            if (!run(dl, "dequantize_int8", emu_quantize::dequantize_int8, static_cast<const signed char*>(q.data()),
                     static_cast<const float*>(scales.data()), y.data(), static_cast<long long>(n), static_cast<long long>(group)))
              return;
            expect_close(y.copy(), want_y, 0, 0, "dequantize_int8 " + context + ", then " + dl.str());
          }
        }
      }
}

// ---- row ops: rows narrower than a warp's share, wider than a block's registers, odd widths

struct Rows {
  int64_t rows, cols;
};
const std::vector<Rows> k_rows = {{1, 1}, {3, 5}, {2, 33}, {5, 127}, {4, 512}, {3, 513}, {2, 1000}, {2, 4096}, {1, 9001}};

std::vector<Launch> row_launches(const OpSpec& spec, Rows r) {
  std::vector<Launch> out;
  for (int sm : {1, 132}) {
    auto shape = spec_launch(spec, "cuda", sm, {{"rows", r.rows}, {"cols", r.cols}});
    EXPECT_TRUE(shape.ok()) << shape.status().message();
    if (shape.ok()) out.push_back({{shape->config.grid.x, 1, 1}, {shape->config.block.x, 1, 1}});
  }
  // A block per row of 128 or 32 threads (as the spec's check launched them before), a whole
  // grid in one block of the largest size these kernels take, and two blocks of 64 threads.
  out.push_back({{unsigned(r.rows)}, {128}});
  out.push_back({{unsigned(r.rows)}, {32}});
  out.push_back({{1}, {512}});
  out.push_back({{2}, {64}});
  return out;
}

TEST_F(CudaEmulationTest, LayerNormForEveryRowWidthLayoutAndLaunch) {
  KILN_REFERENCE("layer_norm", ref);
  // x and y as the layout says; gamma and beta as the tensors 2 and 3 of it.
  for (auto& r : k_rows)
    for (auto& layout : layouts())
      for (auto& l : row_launches(ref.spec, r)) {
        const size_t n = size_t(r.rows * r.cols);
        Tensor<float> x(n, layout.offset(0, 4)), y(n, layout.offset(1, 4)), gamma(r.cols, layout.offset(2, 4)), beta(r.cols, layout.offset(3, 4));
        x.assign(random_floats(n, -2, 3, n));
        gamma.assign(random_floats(r.cols, 0.5f, 1.5f, n + 1));
        beta.assign(random_floats(r.cols, -0.5f, 0.5f, n + 2));
        std::vector<float> want(n, 0.f);
        float eps = 1e-5f;
        const float *px = x.data(), *pg = gamma.data(), *pb = beta.data();
        float* pw = want.data();
        ref({&px, &pg, &pb, &pw, &r.rows, &r.cols, &eps});
        if (!run(l, "layer_norm", emu_layer_norm::layer_norm, x.data(), gamma.data(), beta.data(), y.data(), static_cast<long long>(r.rows),
                 static_cast<long long>(r.cols), eps))
          return;
        expect_close(y.copy(), want, ref.rtol(), ref.atol(),
                     "layer_norm " + std::to_string(r.rows) + "x" + std::to_string(r.cols) + ", " + layout.name + ", " + l.str());
      }
}

TEST_F(CudaEmulationTest, RowSoftmaxAndSoftmaxOnlineForEveryRowWidthLayoutAndLaunch) {
  using Kernel = void (*)(const float*, float*, long long, long long);
  for (auto [op, kernel] : std::vector<std::pair<std::string, Kernel>>{{"row_softmax", emu_row_softmax::row_softmax},
                                                                      {"softmax_online", emu_softmax_online::softmax_online}}) {
    KILN_REFERENCE(op, ref);
    for (auto& r : k_rows)
      for (auto& layout : layouts())
        for (auto& l : row_launches(ref.spec, r)) {
          const size_t n = size_t(r.rows * r.cols);
          Tensor<float> x(n, layout.offset(0, 4)), y(n, layout.offset(1, 4));
          // Spread wide enough that the maximum matters: e^40 would overflow an unshifted sum.
          x.assign(random_floats(n, -40, 40, n));
          std::vector<float> want(n, 0.f);
          const float* px = x.data();
          float* pw = want.data();
          ref({&px, &pw, &r.rows, &r.cols});
          if (!run(l, op, kernel, static_cast<const float*>(x.data()), y.data(), static_cast<long long>(r.rows), static_cast<long long>(r.cols)))
            return;
          expect_close(y.copy(), want, ref.rtol(), ref.atol(),
                       op + " " + std::to_string(r.rows) + "x" + std::to_string(r.cols) + ", " + layout.name + ", " + l.str());
        }
  }
}

// ---- reductions

TEST_F(CudaEmulationTest, ReduceSumForEveryChunkLayoutAndLaunch) {
  KILN_REFERENCE("reduce_sum", ref);
  // A block per chunk (CUB's BlockReduce<float, 256>, 256 threads each): few chunks, each
  // emulated thread costs.
  for (auto [n, chunk] : std::vector<std::pair<size_t, int64_t>>{{1, 3}, {5, 3}, {301, 3}, {4096, 100}, {4097, 100}, {4097, 4096},
                                                                   {10001, 4096}, {5, 4096}})
      for (auto& layout : layouts()) {
        const size_t chunks = (n + chunk - 1) / chunk;
        // CUB's BlockReduce<float, 256>: blocks of 256 threads, however many.
        for (auto& l : launches(ref.spec, {{"n", int64_t(n)}, {"chunk", chunk}}, {{{1}, {256}}, {{3}, {256}}})) {
          Tensor<float> x(n, layout.offset(0, 4)), partial(chunks, layout.offset(1, 4));
          x.assign(random_floats(n, -1, 1, n + chunk));
          std::vector<float> want(chunks, 0.f);
          int64_t count = static_cast<int64_t>(n);
          const float* px = x.data();
          float* pw = want.data();
          ref({&px, &pw, &count, &chunk});
          if (!run(l, "reduce_sum", emu_reduce_sum::reduce_sum, static_cast<const float*>(x.data()), partial.data(), static_cast<long long>(n),
                   static_cast<long long>(chunk)))
            return;
          expect_close(partial.copy(), want, ref.rtol(), ref.atol(),
                       "reduce_sum n=" + std::to_string(n) + ", chunk " + std::to_string(chunk) + ", " + layout.name + ", " + l.str());
        }
      }
}

TEST_F(CudaEmulationTest, SumReduceForEverySizeLayoutAndLaunch) {
  KILN_REFERENCE("sum_reduce", ref);
  for (size_t n : k_sizes)
    for (auto& layout : layouts())
      for (auto& l : launches(ref.spec, {{"n", int64_t(n)}}, {{{unsigned((n + 255) / 256)}, {256}}, {{1}, {32}}, {{7}, {64}}})) {
        Tensor<float> x(n, layout.offset(0, 4));
        x.assign(random_floats(n, -1, 1, n));
        std::vector<double> got(1, 0.0), want(1, 0.0);
        int64_t count = static_cast<int64_t>(n);
        const float* px = x.data();
        double* pw = want.data();
        ref({&px, &pw, &count});
        if (!run(l, "sum_reduce", emu_sum_reduce::sum_reduce, static_cast<const float*>(x.data()), got.data(), static_cast<long long>(n))) return;
        expect_close(got, want, ref.rtol(), ref.atol(), "sum_reduce n=" + std::to_string(n) + ", " + layout.name + ", " + l.str());
      }
}

// ---- the emulator itself refuses what a GPU would not do

namespace misuse {
__global__ void barrier_after_some_exit() {
  if (threadIdx.x == 0) return;
  __syncthreads();
}
__global__ void shuffle_in_a_partial_warp(float* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1); }
__global__ void lanes_that_part_ways(float* out) {
  if (threadIdx.x % 2) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}
__global__ void misaligned_vector_load(const float* x, float* out) { out[0] = __ldg(reinterpret_cast<const float4*>(x + 1)).x; }
}  // namespace misuse

TEST(CudaEmulator, RefusesWhatAGpuWouldFaultOrHangOn) {
  std::vector<float> out(64, 0.f);
  EXPECT_THROW(emu::launch({1}, {64}, "barrier_after_some_exit", misuse::barrier_after_some_exit), emu::EmulationError);
  EXPECT_THROW(emu::launch({1}, {48}, "shuffle_in_a_partial_warp", misuse::shuffle_in_a_partial_warp, out.data()), emu::EmulationError);
  EXPECT_THROW(emu::launch({1}, {32}, "lanes_that_part_ways", misuse::lanes_that_part_ways, out.data()), emu::EmulationError);
  EXPECT_THROW(emu::launch({1}, {2048}, "too many threads", misuse::barrier_after_some_exit), emu::EmulationError);
  // A full warp shuffles, and every block's threads meet at its barriers.
  EXPECT_NO_THROW(emu::launch({2}, {64}, "shuffle_in_a_partial_warp", misuse::shuffle_in_a_partial_warp, out.data()));
  EXPECT_EQ(out[0], 1.f);
  // A misaligned 128-bit load stops the program (UBSan's alignment check, as a GPU faults).
  alignas(16) float x[8] = {};
  EXPECT_DEATH(emu::launch({1}, {1}, "misaligned_vector_load", misuse::misaligned_vector_load, static_cast<const float*>(x), out.data()),
               "misaligned|alignment");
}

}  // namespace
}  // namespace kiln::builders
