// Helpers for tests: real temporary folders, real files, real child processes.
#pragma once

#include <map>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::testing {

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return m_path; }
  std::string operator/(const std::string& rel) const { return m_path + "/" + rel; }
  // Writes `content` to path()/rel, creating folders.
  void write(const std::string& rel, const std::string& content) const;

 private:
  std::string m_path;
};

// The names of the bundled ops (specs/*.toml), sorted.
std::vector<std::string> bundled_op_names();

// Copies the bundled specs/ tree into `dst` (so a test may edit it).
void copy_bundled_specs(const std::string& dst);
std::string bundled_spec_dir();
// `n` distinct ops variant0..variant<n-1> (vector_add with a define each, so each has its own
// key) and the headers they include, alone in `dir`: work for warm and cluster tests.
void write_variant_specs(const std::string& dir, int n);
// tests/specs: ops the tests use (tools/gpu-check-prepare carries their cpu artifacts too).
std::string test_spec_dir();
std::string read_text(const std::string& path);
// The integer `"field":N` in a JSON text (the first one), or -1 when there is none.
int64_t json_int(const std::string& json, const std::string& field);
// The scalar `"field":VALUE` in a JSON text (the first one, a string's quotes taken off), or "".
std::string json_field(const std::string& json, const std::string& field);

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs argv[0] with the extra environment variables, waits, captures stdout and stderr.
ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// A spec folder with a templated CUDA kernel (entry scale_f32 = scale<float>) and its CPU
// twin, for tests of NVRTC name expressions.
void write_templated_spec(const TempDir& dir);

// Copies of ops in tests/specs, into `dir` (a test may edit them). block_sum_f32: a templated kernel (block_sum<float, 128>) on the CPU and
// in CUDA, each block summing its 128 elements through dynamic shared memory.
void write_block_sum_spec(const TempDir& dir);

// two_sources: its kernel, on the CPU and in CUDA, calls a function and
// reads a variable defined in a second source.
void write_two_source_spec(const TempDir& dir);

// A one-off op `name` in `dir`: one entry of that name with `params` (a TOML array's items), an
// empty CPU source, and `file` holding `body` as the only source of its `table` table ("cuda",
// "opencl").
void write_one_off_spec(const TempDir& dir, const std::string& name, const std::string& params, const std::string& table,
                        const std::string& file, const std::string& body);

// The kiln binary built alongside the tests.
std::string kiln_binary();

}  // namespace kiln::testing
