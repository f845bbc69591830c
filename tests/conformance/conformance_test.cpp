// The accelerator conformance suite: one set of tests that every registered backend runs,
// the built-in ones (cpu here; cuda where a GPU is) and the inline-cpu plug-in built in this
// test suite (loaded through KILN_PLUGINS). Adding a backend means passing it. A backend that
// is registered but not available here is skipped with its reason; a capability a backend
// says it lacks is checked to be refused cleanly instead of exercised.
//
// CTest names: conformance/AcceleratorConformance.<Test>/<backend>.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "builders/ops.h"
#include "builders/self_check.h"
#include "kiln/philox.h"
#include "runtime/registry.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

// Every registered backend, the test plug-in included. Called by GoogleTest when it
// registers the tests (after static initialisation, so every built-in backend is there).
std::vector<std::string> backends_under_test() {
  if (!std::getenv("KILN_PLUGINS")) ::setenv("KILN_PLUGINS", KILN_TEST_PLUGIN, 1);
  auto names = runtime::registered_backends();
  for (auto& e : runtime::plugin_errors()) ADD_FAILURE() << e;
  for (auto& n : names)
    for (auto& c : n)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';  // GoogleTest parameter names
  return names;
}

std::string backend_name(const std::string& param) {
  for (auto& n : runtime::registered_backends()) {
    std::string mangled = n;
    for (auto& c : mangled)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    if (mangled == param) return n;
  }
  return param;
}

class AcceleratorConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    name = backend_name(GetParam());
    auto a = runtime::get_accelerator(name);
    if (!a.ok()) GTEST_SKIP() << name << " is registered but not available here: " << a.status().message();
    acc = *a;
  }

  // Ops on this backend, compiling into a cache under the build tree shared by every test
  // process (a content-addressed cache: sharing it is what it is for). On a GPU node without
  // LLVM (tools/gpu-check) the cpu references come from the cache it carries: KILN_CACHE_DIR.
  static std::string cache_dir() {
    const char* carried = std::getenv("KILN_CACHE_DIR");
    return carried && *carried ? carried : KILN_CONFORMANCE_CACHE;
  }
  builders::Ops& ops() {
    if (!m_ops) {
      builders::OpsOptions o;
      o.cache_dir = cache_dir();
      o.spec_dirs = {testing::bundled_spec_dir(), testing::test_spec_dir()};
      o.accelerator = name;
      auto made = builders::Ops::create(o);
      EXPECT_TRUE(made.ok()) << made.status().message();
      m_ops = std::move(made).value();
    }
    return *m_ops;
  }

  // Device buffers of n floats, freed at the end of the test.
  float* device_floats(size_t n) {
    auto p = acc->allocate(n * sizeof(float));
    EXPECT_TRUE(p.ok()) << p.status().message();
    m_buffers.push_back(*p);
    return static_cast<float*>(*p);
  }
  void TearDown() override {
    if (acc)
      for (void* p : m_buffers) acc->deallocate(p);
  }
  // A device buffer of n floats, each `value`.
  float* device_filled(size_t n, float value) {
    float* p = device_floats(n);
    write(p, std::vector<float>(n, value));
    return p;
  }
  std::vector<float> read(const float* device, size_t n) {
    std::vector<float> out(n);
    EXPECT_TRUE(acc->copy(out.data(), device, n * sizeof(float)).ok());
    return out;
  }
  void write(float* device, const std::vector<float>& host) {
    ASSERT_TRUE(acc->copy(device, host.data(), host.size() * sizeof(float)).ok());
  }

  std::string name;
  runtime::Accelerator* acc = nullptr;

 private:
  std::unique_ptr<builders::Ops> m_ops;
  std::vector<void*> m_buffers;
};

// A refusal is kUnavailable with a reason, never a crash or an empty message.
void expect_clean_refusal(const Status& st, const std::string& what) {
  if (st.ok()) return;
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << what << ": " << st.message();
  EXPECT_FALSE(st.message().empty()) << what;
}

TEST_P(AcceleratorConformance, DevicesAreCountedNamedAndSelected) {
  EXPECT_EQ(acc->name(), name);
  ASSERT_GE(acc->device_count(), 1);
  for (int d = 0; d < acc->device_count(); ++d) EXPECT_FALSE(acc->device_name(d).empty());
  int current = acc->current_device();
  EXPECT_GE(current, 0);
  EXPECT_LT(current, acc->device_count());
  EXPECT_TRUE(acc->set_device(current).ok());
  EXPECT_EQ(acc->set_device(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(acc->set_device(acc->device_count()).code(), StatusCode::kInvalidArgument);
  if (acc->device_count() > 1 && !acc->supports(runtime::Capability::kMultiDevice).ok())
    expect_clean_refusal(acc->set_device((current + 1) % acc->device_count()), "set_device");
  EXPECT_TRUE(acc->synchronize().ok());
  EXPECT_FALSE(acc->native_target().empty());
  EXPECT_FALSE(acc->communication_backend().empty());
  // What launches size their grids by (a spec's sm_count): a real count, not a placeholder.
  EXPECT_GE(acc->multiprocessor_count(), 1);
  EXPECT_LE(acc->multiprocessor_count(), 65536);
}

TEST_P(AcceleratorConformance, EveryCapabilityIsAnsweredAndDtypesAgreeWithIt) {
  for (auto c : runtime::k_all_capabilities) expect_clean_refusal(acc->supports(c), std::string(runtime::capability_name(c)));
  auto dtypes = acc->supported_dtypes();
  auto has = [&](runtime::DType t) { return std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end(); };
  EXPECT_TRUE(has(runtime::DType::kFloat32));
  EXPECT_TRUE(has(runtime::DType::kInt32));
  EXPECT_EQ(acc->is_fp16_supported(), has(runtime::DType::kFloat16));
  EXPECT_EQ(acc->is_bf16_supported(), has(runtime::DType::kBFloat16));
  for (auto t : dtypes) EXPECT_GT(runtime::dtype_size(t), 0u) << runtime::dtype_name(t);
}

TEST_P(AcceleratorConformance, MemoryRoundTripsAndIsCounted) {
  acc->reset_peak_memory();
  auto before = acc->memory_stats();
  constexpr size_t n = 1 << 16;
  auto allocated = acc->allocate(n * sizeof(float));
  ASSERT_TRUE(allocated.ok()) << allocated.status().message();
  float* d = static_cast<float*>(*allocated);
  auto during = acc->memory_stats();
  EXPECT_EQ(during.allocated, before.allocated + n * sizeof(float));
  EXPECT_GE(during.reserved, during.allocated);
  EXPECT_GE(during.max_allocated, during.allocated);
  EXPECT_GE(during.max_reserved, during.reserved);
  EXPECT_GT(during.total, 0u);
  EXPECT_LE(during.available, during.total);
  EXPECT_TRUE(acc->on_accelerator(d));
  EXPECT_TRUE(acc->on_accelerator(d + n / 2));
  int on_stack = 0;
  EXPECT_FALSE(acc->on_accelerator(&on_stack));

  ASSERT_TRUE(acc->memset(d, 0, n * sizeof(float)).ok());
  EXPECT_EQ(read(d, n), std::vector<float>(n, 0.0f));
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.5f;
  write(d, host);
  EXPECT_EQ(read(d, n), host);

  acc->deallocate(d);
  auto after = acc->memory_stats();
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.max_allocated, before.allocated + n * sizeof(float));
  acc->reset_peak_memory();
  EXPECT_EQ(acc->memory_stats().max_allocated, after.allocated);
}

TEST_P(AcceleratorConformance, HostMemoryIsPinnedExactlyWhenTheBackendSaysSo) {
  auto h = acc->allocate_host(4096);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(acc->is_pinned(*h), acc->supports(runtime::Capability::kPinnedMemory).ok());
  EXPECT_FALSE(acc->on_accelerator(*h) && acc->is_pinned(*h));
  std::vector<char> ordinary(64);
  EXPECT_FALSE(acc->is_pinned(ordinary.data()));
  std::memset(*h, 7, 4096);  // the host can write it
  acc->deallocate_host(*h);
}

TEST_P(AcceleratorConformance, StreamsRunTheirWorkInOrder) {
  constexpr size_t n = 1 << 15;
  float* a = device_filled(n, 3.0f);
  float* b = device_floats(n);
  auto s = acc->create_stream();
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> host(n, 3.0f);
  // memset b, copy a->b, memset a: only in order does b end as 3s and a as 0s.
  ASSERT_TRUE((*s)->memset_async(b, 0xff, n * sizeof(float)).ok());
  ASSERT_TRUE((*s)->copy_async(b, a, n * sizeof(float)).ok());
  ASSERT_TRUE((*s)->memset_async(a, 0, n * sizeof(float)).ok());
  ASSERT_TRUE((*s)->synchronize().ok());
  EXPECT_TRUE((*s)->query());
  EXPECT_EQ(read(b, n), host);
  EXPECT_EQ(read(a, n), std::vector<float>(n, 0.0f));
}

TEST_P(AcceleratorConformance, EventsOrderWorkAcrossStreamsAndTimeIt) {
  constexpr size_t n = 1 << 20;
  float* a = device_filled(n, 1.5f);
  float* b = device_floats(n);
  auto s1 = acc->create_stream();
  auto s2 = acc->create_stream();
  auto start = acc->create_event();
  auto done = acc->create_event();
  ASSERT_TRUE(s1.ok() && s2.ok() && start.ok() && done.ok());
  EXPECT_TRUE((*done)->query());  // never recorded: complete
  ASSERT_TRUE((*s1)->record(**start).ok());
  ASSERT_TRUE((*s1)->copy_async(b, a, n * sizeof(float)).ok());
  ASSERT_TRUE((*s1)->record(**done).ok());
  ASSERT_TRUE((*s2)->wait(**done).ok());
  ASSERT_TRUE((*s2)->memset_async(a, 0, n * sizeof(float)).ok());  // only after the copy
  ASSERT_TRUE((*s2)->synchronize().ok());
  ASSERT_TRUE((*done)->synchronize().ok());
  EXPECT_TRUE((*done)->query());
  EXPECT_EQ(read(b, n), std::vector<float>(n, 1.5f));
  EXPECT_EQ(read(a, n), std::vector<float>(n, 0.0f));
  auto ms = (*done)->elapsed_ms_since(**start);
  if (acc->supports(runtime::Capability::kEventTiming).ok()) {
    ASSERT_TRUE(ms.ok()) << ms.status().message();
    EXPECT_GE(*ms, 0.0);
  } else {
    EXPECT_FALSE(ms.ok());
  }
}

// CUDA's order: once the event recorded last on a stream is complete, so is the stream. The
// CPU stream once completed the event a moment before it counted the record as done, so a
// query right after the event's synchronize could be false: repeated to catch such a window.
TEST_P(AcceleratorConformance, AStreamIsIdleOnceTheEventThatClosesItIsComplete) {
  constexpr size_t n = 256;
  float* a = device_filled(n, 1.0f);
  float* b = device_floats(n);
  auto s = acc->create_stream();
  auto done = acc->create_event();
  ASSERT_TRUE(s.ok() && done.ok());
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE((*s)->copy_async(b, a, n * sizeof(float)).ok());
    ASSERT_TRUE((*s)->record(**done).ok());
    ASSERT_TRUE((*done)->synchronize().ok());
    ASSERT_TRUE((*s)->query()) << "iteration " << i << ": the event is complete, the stream still busy";
  }
  if (!acc->supports(runtime::Capability::kGraphs).ok() || !acc->supports(runtime::Capability::kGraphEvents).ok()) return;
  ASSERT_TRUE((*s)->begin_capture().ok());
  ASSERT_TRUE((*s)->copy_async(b, a, n * sizeof(float)).ok());
  ASSERT_TRUE((*s)->record(**done).ok());
  auto graph = (*s)->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE((*graph)->launch(**s).ok());
    ASSERT_TRUE((*done)->synchronize().ok());
    ASSERT_TRUE((*s)->query()) << "graph launch " << i << ": its closing event is complete, the stream still busy";
  }
}

TEST_P(AcceleratorConformance, SynchronizeWaitsForEveryStream) {
  constexpr size_t n = 1 << 22;
  float* a = device_filled(n, 2.0f);
  float* b = device_floats(n);
  auto s = acc->create_stream();
  ASSERT_TRUE(s.ok());
  float* c = device_floats(16);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE((*s)->copy_async(b, a, n * sizeof(float)).ok());
  ASSERT_TRUE(acc->default_stream().memset_async(c, 0, 16 * sizeof(float)).ok());  // other memory: no ordering needed
  ASSERT_TRUE(acc->synchronize().ok());
  EXPECT_TRUE((*s)->query());
  EXPECT_TRUE(acc->default_stream().query());
}

TEST_P(AcceleratorConformance, CurrentStreamIsPerThread) {
  EXPECT_EQ(&acc->current_stream(), &acc->default_stream());
  auto s = acc->create_stream();
  ASSERT_TRUE(s.ok());
  acc->set_current_stream(s->get());
  EXPECT_EQ(&acc->current_stream(), s->get());
  runtime::Stream* seen_by_other = nullptr;
  std::thread([&] { seen_by_other = &acc->current_stream(); }).join();
  EXPECT_EQ(seen_by_other, &acc->default_stream());
  acc->set_current_stream(nullptr);
  EXPECT_EQ(&acc->current_stream(), &acc->default_stream());
}

TEST_P(AcceleratorConformance, BundledOpsMatchTheirReferences) {
  for (auto& [op_name, dims] : std::vector<std::pair<std::string, std::map<std::string, int64_t>>>{
           {"vector_add", {{"n", 1}}}, {"vector_add", {{"n", 4099}}}, {"axpby", {{"n", 777}}},
           {"row_softmax", {{"rows", 5}, {"cols", 300}}}, {"sum_reduce", {{"n", 10007}}},
           // The real ops at the sizes their specs give (which divide no block).
           {"adamw", {}}, {"adamw_bf16", {}}, {"layer_norm", {}}, {"softmax_online", {}}, {"gelu", {}}, {"gelu_bf16", {}},
           {"quantize_int8", {}}, {"dequantize_int8", {}}, {"reduce_sum", {}},
           // Dynamic shared memory per block, and sources linked as relocatable device code.
           {"block_sum_f32", {{"n", 100003}}}, {"two_sources", {}}}) {
    auto op = ops().get(op_name);
    ASSERT_TRUE(op.ok()) << op.status().message();
    EXPECT_EQ(&(*op)->accelerator(), acc);
    auto report = builders::run_self_check(ops(), **op, {dims, 3});
    ASSERT_TRUE(report.ok()) << op_name << ": " << report.status().message();
    EXPECT_TRUE(report->passed) << op_name << ": " << report->message;
  }
}

// vector_add launched by hand: z = x + y on a stream of our own.
struct VectorAdd {
  runtime::Kernel* kernel;
  float *x, *y, *z;
  int64_t n;
  Status launch(runtime::Stream& s) const {
    const void* args[] = {&x, &y, &z, &n};
    uint32_t blocks = static_cast<uint32_t>((n + 255) / 256);
    return kernel->launch(s, {blocks, 1, 1}, {256, 1, 1}, args, 4);
  }
};

TEST_P(AcceleratorConformance, LaunchesCheckTheirArguments) {
  auto op = ops().get("vector_add");
  ASSERT_TRUE(op.ok()) << op.status().message();
  auto kernel = (*op)->kernel();
  ASSERT_TRUE(kernel.ok());
  EXPECT_EQ((*kernel)->signature().param_sizes.size(), 4u);
  float* x = device_floats(4);
  const void* args[] = {&x};
  auto st = (*kernel)->launch(acc->default_stream(), {1, 1, 1}, {1, 1, 1}, args, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("takes 4 arguments"), std::string::npos) << st.message();
  EXPECT_FALSE((*op)->kernel("no_such_kernel").ok());
}

TEST_P(AcceleratorConformance, CapturedGraphsReplayWithTheirArgumentsResolved) {
  auto& s = acc->default_stream();
  if (!acc->supports(runtime::Capability::kGraphs).ok()) {
    expect_clean_refusal(s.begin_capture(), "begin_capture");
    return;
  }
  // Everything that is not stream work happens before the capture: CUDA forbids allocating
  // or loading modules on a thread while it captures.
  auto op = ops().get("vector_add");
  ASSERT_TRUE(op.ok()) << op.status().message();
  constexpr int64_t n = 1000;
  VectorAdd add{(*op)->kernel().value(), device_floats(n), device_floats(n), device_floats(n), n};
  Status began = s.begin_capture();
  ASSERT_TRUE(began.ok()) << began.message();
  // Captured while the buffers hold anything at all: nothing runs until the graph does.
  ASSERT_TRUE(add.launch(s).ok());
  ASSERT_TRUE(s.copy_async(add.x, add.z, n * sizeof(float)).ok());  // x = x + y
  auto graph = s.end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().message();

  write(add.x, std::vector<float>(n, 1.0f));
  write(add.y, std::vector<float>(n, 2.0f));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*graph)->launch(s).ok());
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_EQ(read(add.x, n), std::vector<float>(n, 7.0f));  // 1 + 3 * 2

  // On another stream too.
  auto other = acc->create_stream();
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*graph)->launch(**other).ok());
  ASSERT_TRUE((*other)->synchronize().ok());
  EXPECT_EQ(read(add.x, n), std::vector<float>(n, 9.0f));

  // A capture that was never begun cannot end.
  EXPECT_FALSE(s.end_capture().ok());
}

TEST_P(AcceleratorConformance, CapturedEventsOrderAGraphAgainstOtherStreams) {
  auto& s = acc->default_stream();
  auto start = acc->create_event();
  auto done = acc->create_event();
  ASSERT_TRUE(start.ok() && done.ok());
  if (!acc->supports(runtime::Capability::kGraphs).ok() || !acc->supports(runtime::Capability::kGraphEvents).ok()) {
    if (s.begin_capture().ok()) {
      expect_clean_refusal(s.record(**done), "record while capturing");
      (void)s.end_capture();
    }
    return;
  }
  auto op = ops().get("vector_add");
  ASSERT_TRUE(op.ok()) << op.status().message();
  constexpr int64_t n = 1 << 16;
  VectorAdd add{(*op)->kernel().value(), device_floats(n), device_floats(n), device_floats(n), n};
  ASSERT_TRUE(s.begin_capture().ok());
  ASSERT_TRUE(s.record(**start).ok());
  ASSERT_TRUE(add.launch(s).ok());
  ASSERT_TRUE(s.copy_async(add.x, add.z, n * sizeof(float)).ok());
  ASSERT_TRUE(s.record(**done).ok());
  auto graph = s.end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_TRUE((*done)->query());  // captured, not recorded: nothing to wait for yet

  write(add.x, std::vector<float>(n, 1.0f));
  write(add.y, std::vector<float>(n, 2.0f));
  auto other = acc->create_stream();
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*graph)->launch(s).ok());
  // Another stream waits for the graph's record, then zeroes y: only after the graph read it.
  ASSERT_TRUE((*other)->wait(**done).ok());
  ASSERT_TRUE((*other)->memset_async(add.y, 0, n * sizeof(float)).ok());
  ASSERT_TRUE((*other)->synchronize().ok());
  EXPECT_TRUE((*done)->query());
  EXPECT_EQ(read(add.x, n), std::vector<float>(n, 3.0f));
  EXPECT_EQ(read(add.y, n), std::vector<float>(n, 0.0f));
  auto ms = (*done)->elapsed_ms_since(**start);
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  EXPECT_GE(*ms, 0.0);
  // Each launch records anew: waiting on `done` after a second launch waits for that one.
  write(add.y, std::vector<float>(n, 1.0f));
  ASSERT_TRUE((*graph)->launch(s).ok());
  ASSERT_TRUE((*done)->synchronize().ok());
  EXPECT_EQ(read(add.x, n), std::vector<float>(n, 4.0f));
  ASSERT_TRUE(s.synchronize().ok());
}

TEST_P(AcceleratorConformance, RandomStateIsPerDeviceReproducibleAndAdvances) {
  acc->manual_seed(1234);
  EXPECT_EQ(acc->initial_seed(), 1234u);
  EXPECT_EQ(acc->get_rng_state(), (runtime::RngState{1234, 0}));
  auto first = acc->reserve_random(10);  // 10 values: 3 blocks of 4
  auto second = acc->reserve_random(1);
  EXPECT_EQ(first, (runtime::RngState{1234, 0}));
  EXPECT_EQ(second, (runtime::RngState{1234, 3}));
  auto saved = acc->get_rng_state();
  auto a = acc->reserve_random(4);
  acc->set_rng_state(saved);
  EXPECT_EQ(acc->reserve_random(4), a);
  acc->manual_seed_all(7);
  EXPECT_EQ(acc->get_rng_state(), (runtime::RngState{7, 0}));
  uint64_t s = acc->seed();
  EXPECT_EQ(acc->initial_seed(), s);
  // What a kernel draws from a state is a pure function of it (kiln/philox.h).
  EXPECT_EQ(philox::draw_u32(7, 0, 5), philox::draw_u32(7, 0, 5));
  EXPECT_NE(philox::draw_u32(7, 0, 5), philox::draw_u32(7, 1, 5));
}

// A kernel that draws from the generator's state: every backend, however it schedules
// blocks, must produce exactly what the host computes from the same (seed, offset).
TEST_P(AcceleratorConformance, RandomDrawsDependOnlyOnTheStateNotOnScheduling) {
  testing::TempDir dir;
  dir.write("random_uniform.toml", R"(name = "random_uniform"
version = 1
language = "cpp"
sources = ["random_uniform.cpp"]
[[entry]]
name = "random_uniform"
params = ["float* out", "int64_t n", "uint64_t seed", "uint64_t offset"]
[opencl]
sources = ["random_uniform.cl"]
)");
  // OpenCL C has no namespaces, so not kiln/philox.h: the same Philox4x32-10, written again, which
  // must agree with the host's draw for draw.
  dir.write("random_uniform.cl", R"(typedef struct { uint v[4]; } Counter;
Counter philox4x32_10(Counter c, uint k0, uint k1) {
  for (int round = 0; round < 10; ++round) {
    uint hi0 = mul_hi(0xD2511F53u, c.v[0]), lo0 = 0xD2511F53u * c.v[0];
    uint hi1 = mul_hi(0xCD9E8D57u, c.v[2]), lo1 = 0xCD9E8D57u * c.v[2];
    Counter n = {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    c = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}
__kernel void random_uniform(__global float* out, long n, ulong seed, ulong offset) {
  long i = get_global_id(0);
  if (i >= n) return;
  ulong index = offset + (ulong)i / 4;
  Counter c = {{(uint)index, (uint)(index >> 32), 0u, 0u}};
  Counter b = philox4x32_10(c, (uint)seed, (uint)(seed >> 32));
  out[i] = (float)(b.v[i % 4] >> 8) * (1.0f / 16777216.0f);
}
)");
  dir.write("random_uniform.cpp", R"(#include "kiln/cpu_kernel.h"
#include "kiln/philox.h"
void random_uniform(const kiln::cpu::Block& b, float* out, int64_t n, uint64_t seed, uint64_t offset) {
  int64_t begin = (int64_t)kiln::cpu::first_thread(b);
  for (int64_t i = begin; i < begin + (int64_t)b.block_dim.x && i < n; ++i)
    out[i] = kiln::philox::to_unit_float(kiln::philox::draw_u32(seed, offset, (uint64_t)i));
}
)");
  if (acc->native_target().rfind("cpu:", 0) != 0 && acc->native_target().rfind("opencl:", 0) != 0)
    GTEST_SKIP() << "the random test kernel is written for cpu and opencl targets";
  builders::OpsOptions o;
  o.cache_dir = cache_dir();
  o.spec_dirs = {dir.path()};
  o.accelerator = name;
  auto local = builders::Ops::create(o);
  ASSERT_TRUE(local.ok()) << local.status().message();
  auto op = (*local)->get("random_uniform");
  ASSERT_TRUE(op.ok()) << op.status().message();
  constexpr int64_t n = 100003;
  float* out = device_floats(n);
  acc->manual_seed(2024);
  acc->reserve_random(5);  // a launch before this one: the state has moved on
  runtime::RngState state = acc->reserve_random(n);
  const void* args[] = {&out, &n, &state.seed, &state.offset};
  ASSERT_TRUE((*op)->kernel().value()->launch(acc->default_stream(), {(n + 127) / 128, 1, 1}, {128, 1, 1}, args, 4).ok());
  ASSERT_TRUE(acc->default_stream().synchronize().ok());
  auto got = read(out, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], philox::to_unit_float(philox::draw_u32(2024, 2, static_cast<uint64_t>(i)))) << "element " << i;
}

TEST_P(AcceleratorConformance, ProfilingRangesNestPerThread) {
  acc->range_push("outer");
  acc->range_push("inner");
  auto inner = acc->range_pop();
  ASSERT_TRUE(inner.ok());
  EXPECT_EQ(inner->first, "inner");
  std::thread([&] { EXPECT_FALSE(acc->range_pop().ok()); }).join();  // another thread's stack is empty
  auto outer = acc->range_pop();
  ASSERT_TRUE(outer.ok());
  EXPECT_EQ(outer->first, "outer");
  EXPECT_GE(outer->second, inner->second);
  auto none = acc->range_pop();
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(AcceleratorConformance, EnvironmentToExportHoldsTheBackendsVariables) {
  auto prefixes = acc->environment_prefixes();
  ASSERT_FALSE(prefixes.empty());
  std::string var = prefixes.front() + (prefixes.front().back() == '_' ? "CONFORMANCE_PROBE" : "");
  ::setenv(var.c_str(), "42", 1);
  ::setenv("UNRELATED_CONFORMANCE_PROBE", "1", 1);
  auto env = acc->environment_to_export();
  EXPECT_NE(std::find(env.begin(), env.end(), std::make_pair(var, std::string("42"))), env.end());
  for (auto& [k, v] : env) EXPECT_NE(k, "UNRELATED_CONFORMANCE_PROBE");
  EXPECT_TRUE(std::is_sorted(env.begin(), env.end()));
}

TEST_P(AcceleratorConformance, ForeignBytesFailToLoadWithAReason) {
  auto target = builders::parse_target(acc->native_target());
  ASSERT_TRUE(target.ok()) << target.status().message();
  std::string junk = "this is not a module";
  runtime::ModuleImage image{builders::artifact_kind_for(*target), acc->native_target(), junk, {}, "junk"};
  auto m = acc->load_module(image);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("junk"), std::string::npos) << m.status().message();
  runtime::ModuleImage wrong{"no-such-kind", acc->native_target(), junk, {}, "junk"};
  EXPECT_FALSE(acc->load_module(wrong).ok());
}

INSTANTIATE_TEST_SUITE_P(conformance, AcceleratorConformance, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
