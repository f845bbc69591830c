#include "tests/test_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace {
// The tests' tiers are their own, on 127.0.0.1: the once-per-process warning that a tier is
// unsigned (docs/SECURITY.md) is not what they test, and would change every count of warnings.
// tests/security asks for it by setting KILN_REMOTE_UNSIGNED_OK=0; an environment that sets it
// already wins.
const int k_tiers_are_private = ::setenv("KILN_REMOTE_UNSIGNED_OK", "1", 0);
}  // namespace

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

std::string test_spec_dir() { return KILN_TEST_SOURCE_DIR "/tests/specs"; }

std::vector<std::string> bundled_op_names() {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator(bundled_spec_dir()))
    if (e.path().extension() == ".toml") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

void copy_bundled_specs(const std::string& dst) {
  std::filesystem::copy(bundled_spec_dir(), dst,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
}

void write_variant_specs(const std::string& dir, int n) {
  copy_bundled_specs(dir);
  std::string base = read_text(dir + "/vector_add.toml");
  for (int i = 0; i < n; ++i) {
    std::string text = base;
    text.replace(text.find("name = \"vector_add\""), 19, "name = \"variant" + std::to_string(i) + "\"");
    text.replace(text.find("include_dirs = [\"include\"]"), 26,
                 "include_dirs = [\"include\"]\ndefines = [\"VARIANT=" + std::to_string(i) + "\"]");
    std::ofstream(dir + "/variant" + std::to_string(i) + ".toml", std::ios::binary) << text;
  }
  for (const std::string& op : bundled_op_names()) std::filesystem::remove(dir + "/" + op + ".toml");
}

int64_t json_int(const std::string& json, const std::string& field) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + field + "\":(-?[0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

std::string json_field(const std::string& json, const std::string& field) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + field + "\":\"?([^\",}]*)"))) return "";
  return m[1];
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
  for (const char* file : {"block_sum_f32.toml", "block_sum.cpp", "block_sum.cu", "block_sum.cl"})
    dir.write(file, read_text(test_spec_dir() + "/" + file));
}

void write_two_source_spec(const TempDir& dir) {
  for (const char* file : {"two_sources.toml", "kernel.cpp", "helper.cpp", "kernel.cu", "helper.cu", "two_sources.cl", "two_sources_helper.h"})
    dir.write(file, read_text(test_spec_dir() + "/" + file));
}

void write_one_off_spec(const TempDir& dir, const std::string& name, const std::string& params, const std::string& table,
                        const std::string& file, const std::string& body) {
  dir.write(name + ".toml", "name = \"" + name + "\"\nlanguage = \"cpp\"\nsources = [\"" + name + ".cpp\"]\n[[entry]]\nname = \"" + name +
                                "\"\nparams = [" + params + "]\n[" + table + "]\nsources = [\"" + file + "\"]\n");
  dir.write(name + ".cpp", "\n");
  dir.write(file, body);
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
