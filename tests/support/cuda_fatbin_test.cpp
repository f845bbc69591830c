// Kiln's fat binary writer against the CUDA toolkit's own `fatbinary` (when installed): the
// same cubins and PTX must give the same bytes uncompressed, and the same entries (headers and
// decompressed payloads) compressed; and its reader against hostile compressed entries.
#include "support/cuda_fatbin.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "support/little_endian.h"
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


// A cubin-like ELF that compresses: a header, then text that repeats with a counter in it.
std::string compressible_cubin(size_t size) {
  std::string elf = fake_cubin(16);
  for (int i = 0; elf.size() < size; ++i) elf += "SASS " + std::to_string(i % 97) + ";";
  elf.resize(size);
  return elf;
}

// PTX of `kernels` copies of k_ptx's kernel, each its own name: what `fatbinary` stores as it is.
std::string many_kernels_ptx(int kernels) {
  std::string text = k_ptx, head = text.substr(0, text.find(".visible")), kernel = text.substr(text.find(".visible"));
  std::string out = head;
  for (int i = 0; i < kernels; ++i) {
    std::string k = kernel;
    for (size_t at = 0; (at = k.find("twice", at)) != std::string::npos; at += 5) k.replace(at, 5, "tw" + std::to_string(1000 + i));
    out += k + "\n";
  }
  return out;
}

constexpr size_t k_first_entry = 16;  // the fat binary's own header

TEST(CudaFatbinTest, CompressesLargeImagesWithZstdAndReadsThemBack) {
  std::string big = compressible_cubin(200000), small = fake_cubin(3000), ptx = many_kernels_ptx(30);
  auto fatbin = encode_fatbin({{FatbinImage::Kind::kCubin, 90, big}, {FatbinImage::Kind::kCubin, 80, small}, {FatbinImage::Kind::kPtx, 90, ptx}},
                              FatbinCompression::kZstd);
  ASSERT_TRUE(fatbin.ok()) << fatbin.status().message();
  EXPECT_LT(fatbin->size(), big.size() / 4);
  // The first entry: zstd's flag, the frame's size, the size before, a zstd frame.
  const size_t e = k_first_entry;
  EXPECT_EQ(get_le(*fatbin, e + 40, 8), 0x8011u);
  EXPECT_EQ(get_le(*fatbin, e + 56, 8), big.size());
  const uint64_t frame = get_le(*fatbin, e + 16, 4);
  EXPECT_GT(frame, 0u);
  EXPECT_EQ(get_le(*fatbin, e + 8, 8), (frame + 7) & ~uint64_t{7});
  EXPECT_EQ(fatbin->substr(e + 64, 4), std::string("\x28\xb5\x2f\xfd", 4));
  auto images = decode_fatbin(*fatbin);
  ASSERT_TRUE(images.ok()) << images.status().message();
  ASSERT_EQ(images->size(), 3u);
  EXPECT_EQ((*images)[0].bytes, big);
  EXPECT_EQ((*images)[1].bytes.substr(0, small.size()), small);  // under 4 KiB: kept as it is
  EXPECT_EQ((*images)[1].decompressed, nullptr);
  EXPECT_EQ((*images)[2].kind, FatbinImage::Kind::kPtx);
  EXPECT_EQ((*images)[2].bytes, ptx);
  EXPECT_NE((*images)[2].decompressed, nullptr);
  // The PTX entry's size before compression counts its NUL, as fatbinary's does.
  size_t third = e;
  for (int i = 0; i < 2; ++i) third += get_le(*fatbin, third + 4, 4) + get_le(*fatbin, third + 8, 8);
  EXPECT_EQ(get_le(*fatbin, third + 56, 8), ptx.size() + 1);
}

TEST(CudaFatbinTest, RefusesHostileCompressedEntries) {
  std::string big = compressible_cubin(200000);
  std::string good = encode_fatbin({{FatbinImage::Kind::kCubin, 90, big}}, FatbinCompression::kZstd).value();
  auto refused = [](std::string bytes, const char* why) {
    auto got = decode_fatbin(bytes);
    EXPECT_FALSE(got.ok()) << why;
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << why;
    }
  };
  auto with = [&](size_t at, uint64_t value, int bytes) {
    std::string b = good;
    std::string le;
    put_le(le, value, bytes);
    b.replace(at, bytes, le);
    return b;
  };
  const size_t e = k_first_entry;
  refused(with(e + 56, uint64_t{8} << 30, 8), "8 GiB claimed: refused before allocating");
  refused(with(e + 56, big.size() + 1, 8), "a size other than the frame's own");
  refused(with(e + 16, get_le(good, e + 8, 8) + 8, 4), "a frame longer than its payload");
  refused(with(e + 16, 0, 4), "zstd's flag with no frame");
  refused(with(e + 40, 0x2011, 8), "LZ4, which kiln does not read");
  refused(with(e + 40, 0x11, 8), "compressed bytes without zstd's flag");
  std::string cut = good;
  cut[e + 64 + get_le(good, e + 16, 4) / 2] ^= 0x55;  // a flipped byte inside the frame
  refused(cut, "a damaged frame");
  refused(good.substr(0, good.size() - 64), "a fat binary cut short");
  // A frame that claims 1 GiB (its header and the entry's agree) but holds 200 KB: refused,
  // having grown its buffer only as far as the frame really went.
  const unsigned char descriptor = static_cast<unsigned char>(good[e + 64 + 4]);
  ASSERT_EQ(descriptor >> 6, 2);  // a 4-byte content size, after the descriptor and any window byte
  const size_t content_size_at = e + 64 + 5 + (((descriptor >> 5) & 1) ? 0 : 1);
  std::string claim = with(e + 56, 0x3fffffff, 8);
  claim.replace(content_size_at, 4, std::string("\xff\xff\xff\x3f", 4));
  refused(claim, "1 GiB claimed by a 200 KB frame");
}

// `fatbinary --compress-all` (CUDA 13: zstd): the same entry headers as kiln's, but for the
// compressed sizes (zstd's bytes differ between builds of the library), and kiln's reader gets
// the same cubin and PTX out of the toolkit's fat binary as out of its own.
TEST(CudaFatbinTest, CompressesAsTheToolkitsFatbinaryDoes) {
  std::string bin = cuda_toolkit_root() + "/bin";
  if (::access((bin + "/fatbinary").c_str(), X_OK) != 0 || ::access((bin + "/ptxas").c_str(), X_OK) != 0)
    GTEST_SKIP() << "no fatbinary and ptxas in " << bin;
  auto version = cuda_headers_at(cuda_toolkit_root());
  if (!version || std::atoi(version->version.c_str()) < 13) GTEST_SKIP() << "fatbinary before CUDA 13 compresses with LZ4";
  std::string dir = std::filesystem::temp_directory_path() / ("kiln-fatbin-z-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string ptx = many_kernels_ptx(40);
  ASSERT_TRUE(write_file_atomic(dir + "/k.ptx", ptx).ok());
  auto ran = run_subprocess({bin + "/ptxas", "-arch=sm_90", dir + "/k.ptx", "-o", dir + "/k.cubin"}, "");
  ASSERT_TRUE(ran.ok() && ran->exit_code == 0) << (ran.ok() ? ran->err : ran.status().message());
  std::string cubin = read_file(dir + "/k.cubin").value();
  ASSERT_GE(cubin.size(), 4096u);
  ran = run_subprocess({bin + "/fatbinary", "-64", "--compress-all", "--create", dir + "/ref.fatbin", "--image3=kind=elf,sm=90,file=" + dir + "/k.cubin",
                        "--image3=kind=ptx,sm=90,file=" + dir + "/k.ptx"},
                       "");
  ASSERT_TRUE(ran.ok() && ran->exit_code == 0) << (ran.ok() ? ran->err : ran.status().message());
  std::string reference = read_file(dir + "/ref.fatbin").value();
  auto ours = encode_fatbin({{FatbinImage::Kind::kCubin, 90, cubin}, {FatbinImage::Kind::kPtx, 90, ptx}}, FatbinCompression::kZstd);
  ASSERT_TRUE(ours.ok()) << ours.status().message();
  // Each entry's header, less its payload size (8..16) and compressed size (16..20).
  auto headers = [](const std::string& f) {
    std::vector<std::string> out;
    for (size_t at = k_first_entry; at + 64 <= f.size();) {
      uint64_t header = get_le(f, at + 4, 4), payload = get_le(f, at + 8, 8);
      out.push_back(f.substr(at, 8) + f.substr(at + 20, header - 20));
      at += header + payload;
    }
    return out;
  };
  EXPECT_EQ(headers(*ours), headers(reference));
  // The sizes kiln writes follow fatbinary's rules: the payload is the frame padded to 8, and
  // the fat binary's size is its entries'.
  for (const std::string* f : {&*ours, &reference}) {
    size_t at = k_first_entry;
    while (at + 64 <= f->size()) {
      EXPECT_EQ(get_le(*f, at + 8, 8), (get_le(*f, at + 16, 4) + 7) & ~uint64_t{7});
      at += get_le(*f, at + 4, 4) + get_le(*f, at + 8, 8);
    }
    EXPECT_EQ(at, f->size());
    EXPECT_EQ(get_le(*f, 8, 8), f->size() - k_first_entry);
  }
  auto theirs = decode_fatbin(reference);
  ASSERT_TRUE(theirs.ok()) << theirs.status().message();
  ASSERT_EQ(theirs->size(), 2u);
  EXPECT_NE((*theirs)[0].decompressed, nullptr);
  EXPECT_EQ((*theirs)[0].bytes, cubin);
  EXPECT_EQ((*theirs)[1].bytes, ptx);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
