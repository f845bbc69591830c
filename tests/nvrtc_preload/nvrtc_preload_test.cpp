// libkiln_nvrtc.so with the real NVRTC: a program linked against libnvrtc.so.13 (nvrtc_client.c)
// run alone and run with the library preloaded, nodes with their own cache folders sharing a real
// redis-server. Skipped, saying why, where the CUDA toolkit's NVRTC is not installed.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "support/file_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::RedisServer;
using testing::run_process;
using testing::TempDir;

constexpr const char* k_source = R"(#include "my.h"
#include <cuda_fp16.h>
template <int N> __global__ void scale(float* p) { p[threadIdx.x] = twice(p[threadIdx.x]) * N; }
)";

class NvrtcPreload : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(KILN_TEST_NVRTC_CLIENT).empty()) GTEST_SKIP() << "no libnvrtc.so to link the test client against (the CUDA toolkit's NVRTC)";
    m_dir.write("src/client.cu", k_source);
    m_dir.write("inc2/my.h", "__device__ inline float twice(float x) { return 2 * x; }\n");
    ::mkdir((m_dir / "inc1").c_str(), 0755);
    ::mkdir((m_dir / "logs").c_str(), 0755);
  }

  std::vector<std::string> client(const std::vector<std::string>& extra_options = {}) const {
    std::vector<std::string> argv = {KILN_TEST_NVRTC_CLIENT, m_dir / "src/client.cu", "scale<3>", "-arch=sm_90",
                                     "-I" + m_dir / "inc1", "-I" + m_dir / "inc2", "-I" KILN_TEST_CUDA_INCLUDE};
    argv.insert(argv.end(), extra_options.begin(), extra_options.end());
    return argv;
  }
  // The client through kiln: its output, and the line kiln's library logged for its compile.
  struct Run {
    std::string out, log;
  };
  Run through_kiln(const std::string& cache, const std::string& remote = "", const std::vector<std::string>& extra = {},
                   std::map<std::string, std::string> env = {}, const std::string& cwd = "") {
    std::string log = m_dir / ("logs/" + std::to_string(m_runs++));
    env.insert({{"LD_PRELOAD", KILN_TEST_NVRTC_PRELOAD}, {"KILN_CACHE_DIR", m_dir / cache}, {"KILN_REMOTE_CACHE", remote},
                {"KILN_NVRTC_LOG", log}});
    auto argv = client(extra);
    if (!cwd.empty()) argv.insert(argv.begin(), {"env", "-C", cwd});
    auto r = run_process(argv, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto text = read_file(log);
    return {r.out, text.ok() ? *text : ""};
  }
  std::string stats(const std::string& cache) const {
    return run_process({testing::kiln_binary(), "--cache-dir", m_dir / cache, "cache", "stats", "--json"}).out;
  }

  TempDir m_dir;
  int m_runs = 0;
};

TEST_F(NvrtcPreload, AHitAnswersEveryCallAsTheRealCompileDid) {
  auto alone = run_process(client());
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_NE(alone.out.find("compile 0\n"), std::string::npos) << alone.out;
  ASSERT_NE(alone.out.find("lowered 0 _Z5scaleILi3EEvPf"), std::string::npos) << alone.out;

  auto miss = through_kiln("cache");
  EXPECT_EQ(miss.out, alone.out);  // the same PTX, CUBIN, log, lowered name and PCH status
  EXPECT_TRUE(std::regex_search(miss.log, std::regex("client.cu: compiled in .* ms \\([0-9]+ probes\\), kept"))) << miss.log;
  auto hit = through_kiln("cache");
  EXPECT_EQ(hit.out, alone.out);
  EXPECT_TRUE(std::regex_search(hit.log, std::regex("^kiln nvrtc: client.cu: hit \\(disk\\)"))) << hit.log;
  EXPECT_EQ(testing::json_int(stats("cache"), "compiles"), 1);
  // LTO-IR (-dlto) the same way: its bytes, and a CUBIN NVRTC then does not make.
  auto lto_alone = run_process(client({"-dlto"}));
  ASSERT_NE(lto_alone.out.find("ltoir rc 0 size"), std::string::npos) << lto_alone.out;
  EXPECT_EQ(through_kiln("cache", "", {"-dlto"}).out, lto_alone.out);
  auto lto_hit = through_kiln("cache", "", {"-dlto"});
  EXPECT_EQ(lto_hit.out, lto_alone.out);
  EXPECT_NE(lto_hit.log.find("hit (disk)"), std::string::npos) << lto_hit.log;
}

TEST_F(NvrtcPreload, AChangedHeaderOrOneFoundEarlierInTheSearchIsAMiss) {
  auto first = through_kiln("cache");
  EXPECT_NE(first.log.find("compiled"), std::string::npos);
  EXPECT_NE(through_kiln("cache").log.find("hit"), std::string::npos);
  m_dir.write("inc2/my.h", "__device__ inline float twice(float x) { return x + x; }\n");
  auto changed = through_kiln("cache");
  EXPECT_NE(changed.log.find("compiled"), std::string::npos) << changed.log;
  m_dir.write("inc2/my.h", "__device__ inline float twice(float x) { return 2 * x; }\n");
  EXPECT_NE(through_kiln("cache").log.find("hit"), std::string::npos);  // back as it was: the first compile's
  // The same header in a folder searched before: NVRTC now reads that one. A manifest of the files
  // read alone (a depfile) would not see it.
  m_dir.write("inc1/my.h", "__device__ inline float twice(float x) { return 3 * x; }\n");
  auto shadowed = through_kiln("cache");
  EXPECT_NE(shadowed.log.find("compiled"), std::string::npos) << shadowed.log;
  EXPECT_NE(shadowed.out, first.out);  // it compiled the header found first
  EXPECT_EQ(shadowed.out, run_process(client()).out);
}

TEST_F(NvrtcPreload, AHeaderThatNowIncludesAnotherIsCompiledOnceThenServed) {
  EXPECT_NE(through_kiln("cache").log.find("compiled"), std::string::npos);
  m_dir.write("inc2/extra.h", "#define EXTRA 2\n");
  m_dir.write("inc2/my.h", "#include \"extra.h\"\n__device__ inline float twice(float x) { return EXTRA * x; }\n");
  EXPECT_NE(through_kiln("cache").log.find("compiled"), std::string::npos);
  auto second = through_kiln("cache");  // its own manifest now, beside the first
  EXPECT_NE(second.log.find("hit (disk)"), std::string::npos) << second.log;
  EXPECT_EQ(second.out, run_process(client()).out);
  m_dir.write("inc2/my.h", "__device__ inline float twice(float x) { return 2 * x; }\n");
  EXPECT_NE(through_kiln("cache").log.find("hit (disk)"), std::string::npos);  // the first manifest's
  EXPECT_EQ(testing::json_int(stats("cache"), "compiles"), 2);
}

TEST_F(NvrtcPreload, AProgramCompiledAgainWithOtherOptionsIsAnsweredForThem) {
  std::map<std::string, std::string> again{{"RECOMPILE_ARCH", "-arch=compute_80"}};
  auto alone = run_process(client(), again);
  ASSERT_NE(alone.out.find("compile again 0"), std::string::npos) << alone.out;
  EXPECT_EQ(through_kiln("cache", "", {}, again).out, alone.out);
  auto served = through_kiln("cache", "", {}, again);  // the first compile a hit, the second too
  EXPECT_EQ(served.out, alone.out);
  EXPECT_EQ(std::count(served.log.begin(), served.log.end(), '\n'), 2) << served.log;
  EXPECT_EQ(served.log.find("compiled"), std::string::npos) << served.log;
}

TEST_F(NvrtcPreload, WhatElseChangesTheOutputChangesTheKey) {
  auto plain = through_kiln("cache");
  // NVVM's version, chosen by the environment NVRTC reads when it loads.
  std::map<std::string, std::string> nvvm{{"NV_NVVM_VERSION", "nvvm-latest"}};
  auto latest = through_kiln("cache", "", {}, nvvm);
  EXPECT_NE(latest.log.find("compiled"), std::string::npos) << latest.log;
  EXPECT_EQ(latest.out, run_process(client(), nvvm).out);
  // -G writes the working folder into the output (NVRTC asks getcwd): another folder is a miss.
  ::mkdir((m_dir / "elsewhere").c_str(), 0755);
  auto here = through_kiln("cache", "", {"-G"}, {}, m_dir / "src");
  auto there = through_kiln("cache", "", {"-G"}, {}, m_dir / "elsewhere");
  EXPECT_NE(there.log.find("compiled"), std::string::npos) << there.log;
  EXPECT_NE(here.out, there.out);
  EXPECT_NE(through_kiln("cache", "", {"-G"}, {}, m_dir / "elsewhere").log.find("hit"), std::string::npos);
  // Without -G the folder is not asked for, and not in the key.
  EXPECT_NE(through_kiln("cache", "", {}, {}, m_dir / "elsewhere").log.find("hit"), std::string::npos);
}

TEST_F(NvrtcPreload, HeadersThatAreNotPlainFilesOrAreNewerThanTheCompileAreNotKept) {
  // A header under /dev (shared memory): what it holds is not fixed by its content's name.
  std::string shm = "/dev/shm/kiln-nvrtc-test-" + std::to_string(::getpid());
  ::mkdir(shm.c_str(), 0755);
  ASSERT_TRUE(write_file_atomic(shm + "/my.h", "__device__ inline float twice(float x) { return 5 * x; }\n", false).ok());
  std::filesystem::remove(m_dir / "inc2/my.h");  // the search then ends in the folder under /dev
  auto special = through_kiln("cache", "", {"-I" + shm});
  std::filesystem::remove_all(shm);
  EXPECT_NE(special.out.find("compile 0\n"), std::string::npos) << special.out;
  EXPECT_NE(special.log.find("which is not a file, not kept"), std::string::npos) << special.log;
  m_dir.write("inc2/my.h", "__device__ inline float twice(float x) { return 2 * x; }\n");
  // A header stamped in the future: written, as far as its times say, while the compile ran.
  m_dir.write("inc1/my.h", "__device__ inline float twice(float x) { return 4 * x; }\n");
  struct timespec later[2] = {{::time(nullptr) + 3600, 0}, {::time(nullptr) + 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (m_dir / "inc1/my.h").c_str(), later, 0), 0);
  auto newer = through_kiln("cache");
  EXPECT_NE(newer.log.find("was written as it compiled"), std::string::npos) << newer.log;
  EXPECT_NE(through_kiln("cache").log.find("compiled"), std::string::npos);  // so never a hit
}

TEST_F(NvrtcPreload, AHeaderHandedToNvrtcIsKeyedByItsContent) {
  m_dir.write("src/client.cu", std::string("#include \"given.h\"\n") + k_source);
  auto with = [&](const std::string& content) {
    std::string log = m_dir / ("logs/given" + std::to_string(m_runs++));
    auto r = run_process(client(), {{"LD_PRELOAD", KILN_TEST_NVRTC_PRELOAD}, {"KILN_CACHE_DIR", m_dir / "cache"},
                                    {"KILN_REMOTE_CACHE", ""}, {"KILN_NVRTC_LOG", log}, {"GIVEN_HEADER", content}});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto text = read_file(log);
    return text.ok() ? *text : std::string();
  };
  EXPECT_NE(with("#define G 1\n").find("compiled"), std::string::npos);
  EXPECT_NE(with("#define G 1\n").find("hit"), std::string::npos);
  EXPECT_NE(with("#define G 2\n").find("compiled"), std::string::npos);
}

TEST_F(NvrtcPreload, FailedCompilesAndOptionsItCannotKeyRunEveryTime) {
  m_dir.write("src/client.cu", "__global__ void broken( {\n");
  auto alone = run_process(client());
  ASSERT_NE(alone.out.find("compile 6\n"), std::string::npos) << alone.out;  // NVRTC_ERROR_COMPILATION
  for (int i = 0; i < 2; ++i) {
    auto failed = through_kiln("cache");
    EXPECT_EQ(failed.out, alone.out);  // the same log
    EXPECT_NE(failed.log.find("failed (6), not kept"), std::string::npos) << failed.log;
  }
  m_dir.write("src/client.cu", k_source);
  for (int i = 0; i < 2; ++i) {
    auto traced = through_kiln("cache", "", {"--time=" + m_dir / "time.csv"});  // NVRTC writes its phases' times there
    EXPECT_NE(traced.out.find("compile 0\n"), std::string::npos) << traced.out;
    EXPECT_NE(traced.log.find("not cached (option --time)"), std::string::npos) << traced.log;
  }
  EXPECT_NE(stats("cache").find("\"nvrtc_not_cached\":{\"option_--time\":2}"), std::string::npos) << stats("cache");
}

TEST_F(NvrtcPreload, NodesSharingRedisCompileOnce) {
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
  m_dir.write("redis/.keep", "");
  RedisServer redis(m_dir / "redis");
  auto one = through_kiln("node1", redis.url());
  EXPECT_NE(one.log.find("compiled"), std::string::npos) << one.log;
  auto two = through_kiln("node2", redis.url());
  EXPECT_EQ(two.out, one.out);
  EXPECT_TRUE(std::regex_search(two.log, std::regex("^kiln nvrtc: client.cu: hit \\(remote\\)"))) << two.log;
  std::string node2 = stats("node2");
  EXPECT_EQ(testing::json_int(node2, "compiles"), 0) << node2;
  // Then from node 2's own disk.
  EXPECT_NE(through_kiln("node2", redis.url()).log.find("hit (disk)"), std::string::npos);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The library exports what every NVRTC 13 has and no more: a caller that looks up an entry point
// to learn what the NVRTC can do is told the truth.
TEST(NvrtcPreloadExports, OnlyWhatEveryNvrtc13Has) {
  void* lib = ::dlopen(KILN_TEST_NVRTC_PRELOAD, RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  EXPECT_NE(::dlsym(lib, "nvrtcCompileProgram"), nullptr);
  EXPECT_NE(::dlsym(lib, "__nvrtcCPEx"), nullptr);         // cuBLASLt and cuDNN look it up
  EXPECT_EQ(::dlsym(lib, "__nvrtcNvvmHandle"), nullptr);   // 13.2's alone
  EXPECT_EQ(::dlsym(lib, "input_key_text"), nullptr);
  ::dlclose(lib);
}

// kiln's own CUDA ops compile through the real NVRTC behind the preloaded library (the library
// would only cache them twice), and the real one's build id enters their keys, not kiln's.
TEST(NvrtcPreloadAndKilnsOwnOps, KilnsLoaderAskingByNameGetsTheRealNvrtc) {
  if (std::string(KILN_TEST_NVRTC_CLIENT).empty()) GTEST_SKIP() << "no libnvrtc.so here (the CUDA toolkit's NVRTC)";
  std::string lib_dir = std::string(KILN_TEST_CUDA_INCLUDE) + "/../lib64";
  auto r = testing::run_process({testing::kiln_binary(), "toolchains"}, {{"LD_PRELOAD", KILN_TEST_NVRTC_PRELOAD},
                                                                        {"KILN_NVRTC_LIBRARY", "libnvrtc.so.13"},
                                                                        {"LD_LIBRARY_PATH", lib_dir}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("nvrtc: nvrtc;libnvrtc.so.13="), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("libkiln_nvrtc"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
