// Kiln's fat binary writer against the CUDA toolkit's own `fatbinary` (when installed): the
// same cubins and PTX must give the same bytes.
#include "support/cuda_fatbin.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "support/subprocess.h"

namespace kiln {
namespace {

// No comments, no indentation: `fatbinary` blanks those out of the PTX it stores.
constexpr const char* k_ptx =
    ".version 8.8\n.target sm_80\n.address_size 64\n\n.visible .entry twice(\n.param .u64 twice_param_0\n)\n{\n"
    ".reg .b32 %r<2>;\n.reg .b64 %rd<5>;\n.reg .f32 %f<3>;\n\nld.param.u64 %rd1, [twice_param_0];\n"
    "cvta.to.global.u64 %rd2, %rd1;\nmov.u32 %r1, %tid.x;\nmul.wide.u32 %rd3, %r1, 4;\nadd.s64 %rd4, %rd2, %rd3;\n"
    "ld.global.f32 %f1, [%rd4];\nadd.f32 %f2, %f1, %f1;\nst.global.f32 [%rd4], %f2;\nret;\n\n}\n";

std::string fake_cubin(size_t size) {
  std::string elf = std::string("\x7f" "ELF\x02\x01\x01\x41\x08", 9);
  elf.resize(size, '\x5a');
  return elf;
}

TEST(CudaFatbinTest, RoundTripsCubinsAndPtx) {
  std::string a = fake_cubin(3000), b = fake_cubin(1237);
  auto fatbin = encode_fatbin({{FatbinImage::Kind::kCubin, 80, a}, {FatbinImage::Kind::kCubin, 90, b}, {FatbinImage::Kind::kPtx, 90, k_ptx}});
  ASSERT_TRUE(fatbin.ok()) << fatbin.status().message();
  EXPECT_EQ(fatbin->size() % 8, 0u);
  EXPECT_EQ(fatbin->substr(0, 4), std::string("\x50\xed\x55\xba", 4));
  auto images = decode_fatbin(*fatbin);
  ASSERT_TRUE(images.ok()) << images.status().message();
  ASSERT_EQ(images->size(), 3u);
  EXPECT_EQ((*images)[0].sm, 80);
  EXPECT_EQ((*images)[0].bytes.substr(0, a.size()), a);
  EXPECT_EQ((*images)[1].sm, 90);
  EXPECT_EQ((*images)[1].bytes.substr(0, b.size()), b);
  EXPECT_EQ((*images)[2].kind, FatbinImage::Kind::kPtx);
  EXPECT_EQ((*images)[2].bytes, k_ptx);
}

TEST(CudaFatbinTest, RefusesWhatIsNoCubinOrPtx) {
  EXPECT_FALSE(encode_fatbin({{FatbinImage::Kind::kCubin, 80, "not an elf"}}).ok());
  EXPECT_FALSE(encode_fatbin({{FatbinImage::Kind::kPtx, 80, ".target sm_80\n"}}).ok());
  EXPECT_FALSE(decode_fatbin("\x7f" "ELF").ok());
}

TEST(CudaFatbinTest, MatchesTheToolkitsFatbinary) {
  std::string bin = cuda_toolkit_root() + "/bin";
  if (::access((bin + "/fatbinary").c_str(), X_OK) != 0 || ::access((bin + "/ptxas").c_str(), X_OK) != 0)
    GTEST_SKIP() << "no fatbinary and ptxas in " << bin;
  std::string dir = std::filesystem::temp_directory_path() / ("kiln-fatbin-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_file_atomic(dir + "/k.ptx", k_ptx).ok());
  std::vector<std::string> args = {bin + "/fatbinary", "-64", "--compress=false", "--create", dir + "/ref.fatbin"};
  std::vector<std::string> cubins;
  for (int sm : {80, 90}) {
    std::string cubin = dir + "/k" + std::to_string(sm) + ".cubin";
    auto ran = run_subprocess({bin + "/ptxas", "-arch=sm_" + std::to_string(sm), dir + "/k.ptx", "-o", cubin}, "");
    ASSERT_TRUE(ran.ok() && ran->exit_code == 0) << (ran.ok() ? ran->err : ran.status().message());
    args.push_back("--image3=kind=elf,sm=" + std::to_string(sm) + ",file=" + cubin);
    cubins.push_back(read_file(cubin).value());
  }
  args.push_back("--image3=kind=ptx,sm=80,file=" + dir + "/k.ptx");
  auto ran = run_subprocess(args, "");
  ASSERT_TRUE(ran.ok() && ran->exit_code == 0) << (ran.ok() ? ran->err : ran.status().message());
  std::string reference = read_file(dir + "/ref.fatbin").value();
  auto ours = encode_fatbin({{FatbinImage::Kind::kCubin, 80, cubins[0]}, {FatbinImage::Kind::kCubin, 90, cubins[1]},
                             {FatbinImage::Kind::kPtx, 80, k_ptx}});
  ASSERT_TRUE(ours.ok()) << ours.status().message();
  EXPECT_EQ(*ours, reference);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
