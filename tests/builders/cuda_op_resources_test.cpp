// What the bundled CUDA ops cost the GPU, measured without one: each op compiled by both CUDA
// compilers (NVRTC and Clang's NVPTX path) for sm_80 and sm_90, its PTX linked by nvJitLink with
// ptxas's verbose report. Registers, stack, spills and shared memory per entry point are printed
// as a table and held against tests/builders/cuda_op_resources.txt: a figure above its line there
// fails (a new spill, or registers that cost occupancy, is a regression that shows here before any
// GPU runs the op); a figure below it is reported, to be written into the file. The PTX must also
// keep the 128-bit loads and stores the bandwidth-bound kernels are written for.
//
// KILN_UPDATE_CUDA_RESOURCES=1 rewrites the file from this run (docs/CUDA-OPS.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <tuple>

#include "builders/ops.h"
#include "jit/nvrtc/nvjitlink.h"
#include "jit/nvrtc/nvrtc_toolchain.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"
#include "tests/builders/bundled_ops.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

const std::string k_baseline_file = "tests/builders/cuda_op_resources.txt";

struct Row {
  std::string op, toolchain;
  int sm = 0;
  jit::KernelResources r;
  std::string key() const { return op + " " + toolchain + " " + std::to_string(sm) + " " + r.entry; }
};

std::string source_path(const std::string& rel) { return testing::bundled_spec_dir() + "/../" + rel; }

// The file's rows by key, and the CUDA version it was written with.
std::map<std::string, jit::KernelResources> read_baseline(std::string* cuda_version) {
  std::map<std::string, jit::KernelResources> out;
  std::ifstream in(source_path(k_baseline_file));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first == "cuda") {
      fields >> *cuda_version;
      continue;
    }
    Row row;
    row.op = first;
    fields >> row.toolchain >> row.sm >> row.r.entry >> row.r.registers >> row.r.stack_frame >> row.r.spill_stores >> row.r.spill_loads >>
        row.r.shared_bytes;
    if (fields) out[row.key()] = row.r;
  }
  return out;
}

void write_baseline(const std::vector<Row>& rows, const std::string& cuda_version) {
  std::ofstream out(source_path(k_baseline_file));
  out << "# kiln's bundled CUDA ops as nvJitLink's ptxas compiles their PTX, one line per op, compiler, compute\n"
         "# capability and entry point (tests/builders/cuda_op_resources_test.cpp holds every run to it: a figure\n"
         "# above its line fails). Rewritten by KILN_UPDATE_CUDA_RESOURCES=1 ctest -R CudaOpResources.\n"
         "# op toolchain sm entry registers stack_bytes spill_store_bytes spill_load_bytes static_smem_bytes\n";
  out << "cuda " << cuda_version << "\n";
  for (auto& row : rows)
    out << row.key() << " " << row.r.registers << " " << row.r.stack_frame << " " << row.r.spill_stores << " " << row.r.spill_loads << " "
        << row.r.shared_bytes << "\n";
}

TEST(CudaOpResources, ParsesPtxasVerboseOutput) {
  const std::string log =
      "ptxas info    : 10 bytes gmem\n"
      "ptxas info    : Function properties for helper\n"
      "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'layer_norm' for 'sm_90'\n"
      "ptxas info    : Function properties for layer_norm\n"
      "ptxas         .     16 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 110 registers, used 1 barriers, 128 bytes smem\n"
      "ptxas info    : Compile time = 522.918 ms\n"
      "ptxas info    : Compiling entry function '_Z4geluIfEvPKT_PS0_x' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z4geluIfEvPKT_PS0_x\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 30 registers, used 0 barriers, 380 bytes cmem[0]\n";
  auto rows = jit::parse_ptxas_report(log);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].entry, "layer_norm");
  EXPECT_EQ(rows[0].registers, 110);
  EXPECT_EQ(rows[0].stack_frame, 16);
  EXPECT_EQ(rows[0].spill_stores, 4);
  EXPECT_EQ(rows[0].spill_loads, 12);
  EXPECT_EQ(rows[0].shared_bytes, 128);
  EXPECT_EQ(rows[0].barriers, 1);
  EXPECT_EQ(rows[1].entry, "_Z4geluIfEvPKT_PS0_x");
  EXPECT_EQ(rows[1].registers, 30);
  EXPECT_EQ(rows[1].shared_bytes, 0);
  EXPECT_TRUE(jit::parse_ptxas_report("").empty());
}

// Which ops must keep 128-bit global loads and stores in their PTX (every op loads that way; the
// reductions and quantize_int8, whose q is int8, store no float vectors).
bool stores_vectors(const std::string& op) { return op != "reduce_sum" && op != "sum_reduce" && op != "quantize_int8"; }

TEST(CudaOpResources, EveryBundledOpThroughBothCompilersForSm80AndSm90) {
  if (!jit::nvjitlink_available()) GTEST_SKIP() << "nvJitLink is not installed here";
  testing::TempDir cache;
  auto ops = testing::bundled_ops_on_cpu(cache.path());
  const bool nvrtc = jit::load_nvrtc_toolchain().ok();
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  const std::regex vector_load(R"(ld\.global(\.nc)?(\.L1::no_allocate)?\.v4\.(f32|u32|b32))"), vector_store(R"(st\.global\.v4\.(f32|u32|b32))");
  // One compiler's rows; a reason when it is not here (a GPU node's build has no Clang library).
  auto measure = [&](const std::string& toolchain) -> std::string {
    for (const std::string& name : testing::bundled_op_names()) {
      auto spec = ops->find_spec(name).value();
      if (!spec.cuda) continue;
      for (int sm : {80, 90}) {
        auto outcome = ops->build(spec, parse_target("cuda:sm_" + std::to_string(sm)).value());
        if (!outcome.ok() && toolchain == "clang") return outcome.status().message();
        EXPECT_TRUE(outcome.ok()) << name << " " << toolchain << ": " << outcome.status().message();
        if (!outcome.ok()) continue;
        EXPECT_TRUE(outcome->success) << name << " " << toolchain << " sm_" << sm << "\n" << outcome->diagnostics_text();
        if (!outcome->success) continue;
        auto image = decode_cuda_module(outcome->artifact).value();
        EXPECT_TRUE(std::regex_search(image.ptx, vector_load)) << name << " " << toolchain << " sm_" << sm << ": no 128-bit global load";
        if (stores_vectors(name)) {
          EXPECT_TRUE(std::regex_search(image.ptx, vector_store)) << name << " " << toolchain << " sm_" << sm << ": no 128-bit global store";
        }
        auto report = jit::ptxas_resources(image.ptx, sm);
        EXPECT_TRUE(report.ok()) << report.status().message();
        if (!report.ok()) continue;
        // Each entry point's figures, named as the spec names it (templates by their instance).
        for (auto& kernel : outcome->kernels) {
          const std::string& symbol = kernel.symbol.empty() ? kernel.name : kernel.symbol;
          bool found = false;
          for (auto& r : *report) {
            if (r.entry != symbol) continue;
            Row row{name, toolchain, sm, r};
            row.r.entry = kernel.name;
            rows.push_back(row);
            found = true;
          }
          EXPECT_TRUE(found) << name << " " << toolchain << " sm_" << sm << ": ptxas did not report " << symbol;
        }
      }
    }
    return "";
  };
  for (const std::string toolchain : {"nvrtc", "clang"}) {
    if (toolchain == "nvrtc" && !nvrtc) {
      skipped.push_back("nvrtc: NVRTC is not installed here");
      continue;
    }
    ::setenv("KILN_CUDA_TOOLCHAIN", toolchain.c_str(), 1);
    std::string why_not = measure(toolchain);
    ::unsetenv("KILN_CUDA_TOOLCHAIN");
    if (!why_not.empty()) skipped.push_back(toolchain + ": " + why_not);
  }
  ASSERT_FALSE(rows.empty());

  std::string version = "unknown";
  if (auto headers = cuda_headers_at(cuda_toolkit_root())) version = headers->version;
  std::printf("%-16s %-6s %-5s %-18s %5s %6s %7s %7s %6s\n", "op", "via", "sm", "entry", "regs", "stack", "spill>", "spill<", "smem");
  for (auto& row : rows)
    std::printf("%-16s %-6s %-5d %-18s %5d %6lld %7lld %7lld %6lld\n", row.op.c_str(), row.toolchain.c_str(), row.sm, row.r.entry.c_str(),
                row.r.registers, static_cast<long long>(row.r.stack_frame), static_cast<long long>(row.r.spill_stores),
                static_cast<long long>(row.r.spill_loads), static_cast<long long>(row.r.shared_bytes));
  for (auto& s : skipped) std::printf("not measured: %s\n", s.c_str());

  if (const char* update = std::getenv("KILN_UPDATE_CUDA_RESOURCES"); update && std::string(update) == "1") {
    write_baseline(rows, version);
    std::printf("wrote %s (CUDA %s)\n", k_baseline_file.c_str(), version.c_str());
    return;
  }
  std::string baseline_version;
  auto baseline = read_baseline(&baseline_version);
  ASSERT_FALSE(baseline.empty()) << "no " << k_baseline_file << ": write it with KILN_UPDATE_CUDA_RESOURCES=1";
  // Another toolkit's ptxas allocates registers its own way: then only spills and stack count.
  const bool same_toolkit = baseline_version == version;
  if (!same_toolkit)
    std::printf("%s was written with CUDA %s, this is %s: registers are reported, not held to it\n", k_baseline_file.c_str(),
                baseline_version.c_str(), version.c_str());
  for (auto& row : rows) {
    auto it = baseline.find(row.key());
    if (it == baseline.end()) {
      ADD_FAILURE() << row.key() << " is not in " << k_baseline_file << ": add it (KILN_UPDATE_CUDA_RESOURCES=1)";
      continue;
    }
    const jit::KernelResources& want = it->second;
    EXPECT_LE(row.r.spill_stores, want.spill_stores) << row.key() << ": spills where it did not";
    EXPECT_LE(row.r.spill_loads, want.spill_loads) << row.key() << ": spills where it did not";
    EXPECT_LE(row.r.stack_frame, want.stack_frame) << row.key() << ": a larger stack frame (local memory)";
    if (same_toolkit) {
      EXPECT_LE(row.r.registers, want.registers) << row.key() << ": more registers a thread (less occupancy)";
    }
    if (row.r.registers < want.registers || row.r.spill_stores < want.spill_stores)
      std::printf("%s: fewer than %s says (%d registers, was %d): rewrite it\n", row.key().c_str(), k_baseline_file.c_str(),
                  row.r.registers, want.registers);
  }
}

}  // namespace
}  // namespace kiln::builders
