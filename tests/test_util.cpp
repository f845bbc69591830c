#include "tests/test_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kiln::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/kiln-test-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  m_path = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(m_path, ec);
}

void TempDir::write(const std::string& rel, const std::string& content) const {
  std::filesystem::path p = m_path + "/" + rel;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
}

std::string bundled_spec_dir() { return KILN_TEST_SOURCE_DIR "/specs"; }

void copy_bundled_specs(const std::string& dst) {
  std::filesystem::copy(bundled_spec_dir(), dst,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string kiln_binary() { return KILN_TEST_BINARY; }

void write_templated_spec(const TempDir& dir) {
  dir.write("scale_f32.toml",
            "name = \"scale_f32\"\nlanguage = \"cpp\"\nsources = [\"scale.cpp\"]\n"
            "[[entry]]\nname = \"scale_f32\"\nname_expression = { cuda = \"scale<float>\" }\n"
            "params = [\"float* x\", \"float a\", \"int64_t n\"]\n[cuda]\nsources = [\"scale.cu\"]\n");
  dir.write("scale.cpp",
            "#include <kiln/cpu_kernel.h>\n"
            "void scale_f32(const kiln::cpu::Block& b, float* x, float a, int64_t n) {\n"
            "  for (int64_t i = b.block_idx.x * b.block_dim.x; i < n && i < (b.block_idx.x + 1) * b.block_dim.x; ++i) x[i] *= a;\n"
            "}\n");
  dir.write("scale.cu",
            "template <typename T>\n"
            "__global__ void scale(T* x, T a, long long n) {\n"
            "  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;\n"
            "  if (i < n) x[i] *= a;\n"
            "}\n");
}

void write_block_sum_spec(const TempDir& dir) {
  dir.write("block_sum_f32.toml", R"toml(name = "block_sum_f32"
language = "cpp"
sources = ["block_sum.cpp"]
[[entry]]
name = "block_sum_f32"
name_expression = "block_sum<float, 128>"
params = ["const float* x", "float* out", "int64_t n"]
[check]
dims = { n = 100003 }
block = 128
grid = "cdiv(n, block)"
shared_bytes = "block * 4"
reference = "block_sum_reference"
buffers = [{ name = "x", type = "float", count = "n" }, { name = "out", type = "float", count = "cdiv(n, block)", init = "zero", output = true }]
args = ["x", "out", "n"]
rtol = 1e-4
atol = 1e-5
[cuda]
sources = ["block_sum.cu"]
)toml");
  dir.write("block_sum.cpp", R"(#include <kiln/cpu_kernel.h>
// Stages the block's elements in its dynamic shared memory, then sums them from there.
template <class T, int B>
void block_sum(const kiln::cpu::Block& b, const T* x, T* out, int64_t n) {
  T* staged = kiln::cpu::shared_memory<T>(b);
  int64_t base = int64_t(kiln::cpu::first_thread(b));
  for (int t = 0; t < B; ++t) staged[t] = base + t < n ? x[base + t] : T(0);
  T sum = 0;
  for (int t = 0; t < B; ++t) sum += staged[t];
  out[b.block_idx.x] = sum;
}
void block_sum_reference(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i / 128] += x[i];
}
)");
  dir.write("block_sum.cu", R"(template <class T, int B>
__global__ void block_sum(const T* x, T* out, long long n) {
  extern __shared__ unsigned char shared_bytes[];
  T* staged = reinterpret_cast<T*>(shared_bytes);
  long long i = (long long)blockIdx.x * B + threadIdx.x;
  staged[threadIdx.x] = i < n ? x[i] : T(0);
  __syncthreads();
  for (int s = B / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) staged[threadIdx.x] += staged[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = staged[0];
}
)");
}

void write_two_source_spec(const TempDir& dir) {
  dir.write("two_sources.toml", R"toml(name = "two_sources"
language = "cpp"
sources = ["kernel.cpp", "helper.cpp"]
[[entry]]
name = "two_sources"
params = ["const float* x", "float* y", "int64_t n"]
[check]
dims = { n = 10007 }
block = 256
grid = "cdiv(n, block)"
reference = "two_sources_reference"
buffers = [{ name = "x", type = "float", count = "n" }, { name = "y", type = "float", count = "n", output = true }]
args = ["x", "y", "n"]
[cuda]
sources = ["kernel.cu", "helper.cu"]
)toml");
  dir.write("kernel.cpp", R"(#include <kiln/cpu_kernel.h>
float helper(float x);
extern float scale;
void two_sources(const kiln::cpu::Block& b, const float* x, float* y, int64_t n) {
  for (int64_t i = kiln::cpu::first_thread(b); i < n && i < int64_t(kiln::cpu::first_thread(b) + b.block_dim.x); ++i)
    y[i] = helper(x[i]) * scale;
}
void two_sources_reference(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * 3.0f + 1.0f) * 2.0f;
}
)");
  dir.write("helper.cpp", "float scale = 2.0f;\nfloat helper(float x) { return x * 3.0f + 1.0f; }\n");
  dir.write("kernel.cu", R"(extern __device__ float scale;
__device__ float helper(float x);
extern "C" __global__ void two_sources(const float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = helper(x[i]) * scale;
}
)");
  dir.write("helper.cu", "__device__ float scale = 2.0f;\n__device__ float helper(float x) { return x * 3.0f + 1.0f; }\n");
}

ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  TempDir io;
  std::string out_path = io / "out", err_path = io / "err";
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, 1);
    ::dup2(err, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ProcessResult r;
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  return r;
}

}  // namespace kiln::testing
