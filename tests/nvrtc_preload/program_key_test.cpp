// What libkiln_nvrtc.so keys a program by and keeps of a compile (nvrtc_preload/program_key.h):
// every field of the key counts, options it cannot key are named, and bytes from the store that
// are not what it wrote are refused, never read past their end.
#include "nvrtc_preload/program_key.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>

#include "tests/test_util.h"

namespace kiln::nvrtc_preload {
namespace {

ProgramInput base_input() {
  ProgramInput in;
  in.nvrtc_identity = "65be0db3 13.0";
  in.name = "k.cu";
  in.source = "__global__ void k() {}";
  in.headers = {{"a.h", "#define A 1"}};
  in.options = {"-arch=sm_90", "-I/inc"};
  in.name_expressions = {"k"};
  return in;
}

TEST(NvrtcProgramKey, EveryInputChangesTheKey) {
  const std::string base = input_key_text(base_input());
  std::vector<ProgramInput> changed(8, base_input());
  changed[0].nvrtc_identity = "65be0db3 13.2";
  changed[1].name = "k2.cu";
  changed[2].source += " ";
  changed[3].headers[0].second = "#define A 2";
  changed[4].headers[0].first = "b.h";
  changed[5].options = {"-I/inc", "-arch=sm_90"};  // order matters: a later -D wins
  changed[6].name_expressions.push_back("k2");
  changed[7].options = {"-arch=sm_90 -I/inc"};  // one option with a blank is not two
  for (auto& c : changed) EXPECT_NE(input_key_text(c), base);
  // Fields cannot run into each other: text moved from the source into a header is another key.
  ProgramInput a = base_input(), b = base_input();
  a.source = "x";
  a.headers = {{"h", "yz"}};
  b.source = "xy";
  b.headers = {{"h", "z"}};
  EXPECT_NE(input_key_text(a), input_key_text(b));
}

TEST(NvrtcProgramKey, OptionsThatTouchFilesOrAreUnknownAreNamed) {
  for (const char* known : {"-arch=sm_90", "--gpu-architecture=compute_90", "-I/x", "--include-path=/x", "-DN=1", "-U N",
                            "-std=c++17", "--use_fast_math", "-default-device", "-lineinfo", "--dlink-time-opt", "-rdc=true"})
    EXPECT_EQ(uncacheable_option(known), "") << known;
  EXPECT_EQ(uncacheable_option("--pch"), "precompiled headers (--pch)");
  EXPECT_EQ(uncacheable_option("--use-pch=/tmp/a.pch"), "precompiled headers (--use-pch)");
  EXPECT_EQ(uncacheable_option("--create-pch=a.pch"), "precompiled headers (--create-pch)");
  EXPECT_EQ(uncacheable_option("--fdevice-time-trace=t.json"), "option --fdevice-time-trace");
  EXPECT_EQ(uncacheable_option("--time=t.csv"), "option --time");
  EXPECT_EQ(uncacheable_option("-fsomething-new"), "option -fsomething-new");
}

TEST(NvrtcProgramKey, TheArtifactKeyIsTheManifestAsItIsNow) {
  testing::TempDir dir;
  dir.write("inc/a.h", "one");
  std::vector<std::string> paths = {dir / "inc/a.h", dir / "earlier/a.h", dir / "inc"};
  auto key = [&] {
    std::vector<Probe> probes;
    for (auto& p : paths) probes.push_back({p, probe_state(p)});
    return artifact_key_text("input", probes);
  };
  EXPECT_EQ(probe_state(dir / "earlier/a.h"), "absent");
  EXPECT_EQ(probe_state(dir / "inc"), "dir");
  const std::string first = key();
  EXPECT_EQ(key(), first);
  dir.write("inc/a.h", "two");  // a header that changed
  EXPECT_NE(key(), first);
  dir.write("inc/a.h", "one");
  EXPECT_EQ(key(), first);
  dir.write("earlier/a.h", "one");  // one that appeared where the search found nothing before
  EXPECT_NE(key(), first);
  EXPECT_NE(artifact_key_text("input2", {}), artifact_key_text("input", {}));
}

TEST(NvrtcProgramKey, PathsRoundTripAndMalformedListsAreRefused) {
  std::vector<std::string> paths = {"/usr/local/cuda/include/cuda_fp16.h", "inc/a b.h", "x:y"};
  auto back = decode_paths(encode_paths(paths));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, paths);
  EXPECT_TRUE(decode_paths("")->empty());
  for (std::string_view bad : {"5\nabc", "3abc", "\nabc", "-1\na", "99999999999999999999999\na", "0\n", "3\nabc2\n", "x\nabc"})
    EXPECT_FALSE(decode_paths(bad)) << bad;
  EXPECT_FALSE(decode_paths(std::string((1 << 20) + 1, '1')));
}

TEST(NvrtcProgramKey, ManifestListsRoundTripWithinTheirBounds) {
  std::vector<std::vector<std::string>> lists = {{"/a.h", "env:NVRTC_APPEND_FLAGS"}, {"/a.h", "/b.h", "cwd:"}};
  auto back = decode_manifests(encode_manifests(lists));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, lists);
  std::vector<std::vector<std::string>> too_many(k_max_manifest_lists + 1, {"/a.h"});
  EXPECT_FALSE(decode_manifests(encode_manifests(too_many)));
  EXPECT_FALSE(decode_manifests("9\n3\nabc"));  // a list's length past what is left
  // What would not decode is not written: a compile that looked at that much is not kept.
  std::vector<std::string> huge(70000, "/usr/include/x.h");
  EXPECT_FALSE(paths_fit(huge));
  EXPECT_FALSE(decode_paths(encode_paths(huge)));
  std::vector<std::string> fits(1000, std::string(200, 'p'));
  EXPECT_TRUE(paths_fit(fits));
  EXPECT_TRUE(decode_paths(encode_paths(fits)));
}

TEST(NvrtcProgramKey, StampsTellAFileWrittenDuringTheCompile) {
  testing::TempDir dir;
  dir.write("a.h", "one");
  std::string stamp = stamp_now(dir / "a.h");
  ASSERT_EQ(stamp.rfind("file:", 0), 0u) << stamp;
  EXPECT_FALSE(stamp_newer_than(stamp, int64_t{::time(nullptr) + 10} * 1000000000));
  EXPECT_TRUE(stamp_newer_than(stamp, int64_t{::time(nullptr) - 10} * 1000000000));
  dir.write("a.h", "two, longer");
  EXPECT_NE(stamp_now(dir / "a.h"), stamp);
  EXPECT_EQ(stamp_now(dir / "none.h"), "absent");
  EXPECT_EQ(stamp_now("/dev/null"), "special");
  EXPECT_EQ(stamp_now("/proc/self/status"), "special");
  ::setenv("KILN_TEST_NVRTC_VAR", "x", 1);
  EXPECT_EQ(stamp_now("env:KILN_TEST_NVRTC_VAR"), "value:x");
  ::unsetenv("KILN_TEST_NVRTC_VAR");
  EXPECT_EQ(probe_state("env:KILN_TEST_NVRTC_VAR"), "unset");
}

TEST(NvrtcProgramKey, TheTimeOfACompileAndNvrtcsEnvironmentAreSeen) {
  EXPECT_EQ(uncacheable_text("__global__ void k() {}"), "");
  EXPECT_NE(uncacheable_text("const char* built = __DATE__;"), "");
  EXPECT_NE(uncacheable_text("__TIMESTAMP__"), "");
  ::setenv("NV_NVVM_VERSION", "nvvm-latest", 1);
  auto env = environment_in_key();
  ::unsetenv("NV_NVVM_VERSION");
  EXPECT_NE(std::find(env.begin(), env.end(), "NV_NVVM_VERSION=nvvm-latest"), env.end());
  ProgramInput a = base_input(), b = base_input();
  b.environment = {"NV_NVVM_VERSION=nvvm-latest"};
  EXPECT_NE(input_key_text(a), input_key_text(b));
  EXPECT_NE(uncacheable_option("-Xptxas=--apply-controls=/tmp/c.txt"), "");
  EXPECT_NE(uncacheable_option("--split-compile=4"), "");
  EXPECT_EQ(uncacheable_option("/path/without/its/option"), "a value without its option");
}

TEST(NvrtcProgramKey, ResultsRoundTripAndDamagedOnesAreRefused) {
  CompileResult r;
  r.compile_code = 0;
  r.outputs["ptx"] = {0, std::string("ptx text\0", 9)};
  r.outputs["cubin"] = {0, std::string("\x7f" "ELF\0\1", 6)};
  r.outputs["ltoir"] = {7, ""};  // NVRTC's answer when no LTO-IR was asked for
  r.outputs["log"] = {0, std::string(1, '\0')};
  r.lowered_names["k<3>"] = {0, "_Z1kILi3EEvv"};
  r.lowered_names["bad"] = {10, ""};
  r.pch_create_status = 13;
  r.pch_heap_required_code = 0;
  r.pch_heap_required = 12345;
  auto files = encode_result(r);
  std::map<std::string, std::string> stored(files.begin(), files.end());
  EXPECT_EQ(stored.count("ltoir"), 0u);  // a failed getter keeps no bytes
  auto back = decode_result(stored);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->compile_code, 0);
  EXPECT_EQ(back->outputs, r.outputs);
  EXPECT_EQ(back->lowered_names, r.lowered_names);
  EXPECT_EQ(back->pch_create_status, 13);
  EXPECT_EQ(back->pch_heap_required, 12345u);

  auto without = [&](const std::string& name) {
    auto m = stored;
    m.erase(name);
    return m;
  };
  EXPECT_FALSE(decode_result(without("status")));
  EXPECT_FALSE(decode_result(without("names")));
  EXPECT_FALSE(decode_result(without("cubin")));  // the status says it succeeded: its bytes must be there
  for (std::string bad_status : {"", "1\n0", "1\n01\n31\n0", "1\n01\n31\n01\n01\nx1\n0", "1\n01\n31\n01\n03\nptx",
                                "1\n01\n31\n01\n05\nother1\n0"}) {
    auto m = stored;
    m["status"] = bad_status;
    EXPECT_FALSE(decode_result(m)) << bad_status;
  }
  auto m = stored;
  m["names"] = "4\nk<3>1\n0";  // a lowered name cut off
  EXPECT_FALSE(decode_result(m));
}

}  // namespace
}  // namespace kiln::nvrtc_preload
