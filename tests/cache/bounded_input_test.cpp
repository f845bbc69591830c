// Bytes that come from a remote tier, a bundle or a file are bounded before anything is sized from
// them, and checked before anything is kept (issue 44, "bounded before allocated, checked before
// kept"): zstd bombs, file groups with huge counts, manifests naming devices, remote artifacts that
// fail their checks. Where memory is the point, the body runs in a child whose address space may
// grow by 128 MiB past what it maps when it starts: an allocation of gigabytes fails the test
// instead of passing unseen on a machine with memory to spare.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>

#include "builders/op_builder.h"
#include "builders/remote_lookup.h"
#include "cache/artifact_record.h"
#include "cache/blob.h"
#include "cache/file_group.h"
#include "cache/remote.h"
#include "cache/store.h"
#include "support/file_util.h"
#include "support/little_endian.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using builders::ExpectedArtifact;
using builders::KeyParts;
using builders::ManifestEntry;
using builders::OpSpec;
using cache::ArtifactRecord;
using cache::RemoteObject;
using cache::RemoteTiers;
using cache::Store;
using kiln::testing::RedisServer;
using kiln::testing::TempDir;
using Clock = std::chrono::steady_clock;

constexpr size_t k_headroom = size_t{128} << 20;
constexpr int k_out_of_memory = 99;  // what a child exits with when an allocation failed

// Runs `body` in a child process whose address space may grow by `headroom` bytes past what it
// maps when it starts; the body's return value, k_out_of_memory when an allocation failed, or
// 128 + the signal that ended it. Call it with no other thread running (fork copies one).
int run_with_address_space_limit(const std::function<int()>& body, size_t headroom = k_headroom) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + headroom;
    if (pages == 0 || ::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(98);
    int code = 0;
    try {
      code = body();
    } catch (const std::bad_alloc&) {
      code = k_out_of_memory;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A blob file whose content section is `section` as it is, with codec bits `codec` (1: zstd)
// and the raw size the header declares; empty metadata.
std::string blob_with_section(uint64_t raw_size, std::string_view section, uint32_t codec = 1) {
  std::string out("KILNBLOB", 8);
  put_le(out, cache::k_blob_format_version, 4);
  put_le(out, codec, 4);
  put_le(out, raw_size, 8);
  put_le(out, section.size(), 8);
  put_hash(out, Hash128{});
  put_le(out, 0, 8);
  put_hash(out, xxh3_128(""));
  put_le(out, 0, 8);
  out.append(section);
  return out;
}

// A zstd frame by hand (RFC 8878): it declares `content_size` and holds `blocks` RLE blocks of
// 128 KiB of zeros; `single_segment` leaves out the window descriptor (the window is then the
// whole content), else the window is 128 KiB.
std::string rle_frame(uint64_t content_size, size_t blocks, bool single_segment) {
  std::string f;
  put_le(f, 0xFD2FB528u, 4);
  f += static_cast<char>(single_segment ? 0xE0 : 0xC0);  // an 8-byte content size, no checksum
  if (!single_segment) f += static_cast<char>(7 << 3);   // window 2^(10+7) = 128 KiB
  put_le(f, content_size, 8);
  for (size_t i = 0; i < blocks; ++i) {
    uint32_t last = i + 1 == blocks ? 1 : 0;
    put_le(f, last | (1u << 1) | (uint32_t{128 << 10} << 3), 3);  // an RLE block of 128 KiB
    f += '\0';
  }
  return f;
}

// A skippable frame that brings `frame` to `total` bytes (any zstd reader skips it).
std::string padded(std::string frame, size_t total) {
  put_le(frame, 0x184D2A50u, 4);
  size_t pad = total - frame.size() - 4;
  put_le(frame, pad, 4);
  frame.append(pad, '\0');
  return frame;
}

bool says(const Status& st, std::string_view what) { return st.message().find(what) != std::string::npos; }

TEST(BoundedInputTest, TheLimitCatchesAnAllocationOfAGibibyte) {
  // The harness itself: what the tests below rely on to see an allocation.
  EXPECT_EQ(run_with_address_space_limit([] { return std::string(size_t{1} << 30, 'x').size() > 0 ? 0 : 1; }), k_out_of_memory);
  EXPECT_EQ(run_with_address_space_limit([] { return std::string(size_t{64} << 20, 'x').size() > 0 ? 0 : 1; }), 0);
}

TEST(BoundedInputTest, ANinetySevenByteBlobWhoseFrameDeclaresFourGibibytesIsRefusedWithoutAllocatingThem) {
  std::string bomb = blob_with_section(uint64_t{4} << 30, rle_frame(uint64_t{4} << 30, 1, /*single_segment=*/true));
  ASSERT_LT(bomb.size(), 100u);
  int code = run_with_address_space_limit([&] {
    auto got = cache::decode_blob(bomb);
    if (got.ok()) return 1;
    if (got.status().code() != StatusCode::kDataLoss || !says(got.status(), "times its stored size")) return 2;
    return 0;
  });
  EXPECT_EQ(code, 0) << "1: decoded, 2: another error, " << k_out_of_memory << ": it allocated past 128 MiB";
}

TEST(BoundedInputTest, AFrameThatDeclaresMoreThanItHoldsCostsOnlyWhatItProduces) {
  // 1 GiB declared; padded to 4 MiB so that it passes the ratio (256:1); it holds 1 MiB. Read
  // with the declared size allocated up front, it cost 1 GiB; streamed, a bounded first step.
  std::string frame = rle_frame(uint64_t{1} << 30, 8, /*single_segment=*/false);
  std::string blob = blob_with_section(uint64_t{1} << 30, padded(frame, size_t{4} << 20));
  int code = run_with_address_space_limit([&] {
    auto got = cache::decode_blob(blob);
    return got.ok() ? 1 : got.status().code() == StatusCode::kDataLoss ? 0 : 2;
  });
  EXPECT_EQ(code, 0);
}

TEST(BoundedInputTest, AFrameThatProducesMoreThanItDeclaresIsStoppedAtItsDeclaredSize) {
  // 1 MiB declared, 1 GiB of blocks (32 KiB of frame).
  std::string blob = blob_with_section(uint64_t{1} << 20, rle_frame(uint64_t{1} << 20, 8192, /*single_segment=*/false));
  int code = run_with_address_space_limit([&] {
    auto got = cache::decode_blob(blob);
    return got.ok() ? 1 : got.status().code() == StatusCode::kDataLoss ? 0 : 2;
  });
  EXPECT_EQ(code, 0);
}

TEST(BoundedInputTest, ASectionDenserThanTheRatioIsRefusedAndKilnPadsItsOwnDenseContent) {
  std::string zeros(size_t{10} << 20, '\0');
  // zstd alone: 10 MiB of zeros in a few hundred bytes, far past 256:1.
  std::string frame(ZSTD_compressBound(zeros.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), zeros.data(), zeros.size(), -1));
  ASSERT_LT(frame.size(), zeros.size() / 256);
  auto refused = cache::decode_blob(blob_with_section(zeros.size(), frame));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(says(refused.status(), "more than 256 times its stored size")) << refused.status().message();
  // What kiln writes is padded to the ratio, still compressed, and reads back whole.
  cache::EncodedBlob mine = cache::encode_blob(zeros, std::string(100000, 'm'));
  EXPECT_GE(mine.bytes.size(), cache::k_blob_header_size + zeros.size() / 256);
  EXPECT_LT(mine.bytes.size(), zeros.size() / 100);
  auto back = cache::decode_blob(mine.bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->content, zeros);
  EXPECT_EQ(back->metadata, std::string(100000, 'm'));
}

TEST(BoundedInputTest, BytesAfterASectionsFrameOtherThanPaddingAreRefused) {
  std::string content;
  for (int i = 0; content.size() < 50000; ++i) content += std::to_string(i * 7919 % 10007) + " ";
  std::string frame(ZSTD_compressBound(content.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), content.data(), content.size(), 3));
  auto two_frames = cache::decode_blob(blob_with_section(content.size(), frame + frame));
  ASSERT_FALSE(two_frames.ok());
  EXPECT_TRUE(says(two_frames.status(), "bytes after its zstd frame")) << two_frames.status().message();
}

TEST(BoundedInputTest, AFileGroupWithAHugeCountIsRefusedBeforeAnythingIsSized) {
  // The count said 8 million files in 8 MiB: sized first, that was 256 MB of views.
  std::string group = "kiln-files 1\n8000000\n" + std::string(size_t{8} << 20, '0');
  int code = run_with_address_space_limit([&] {
    auto got = cache::decode_file_group(group);
    if (got.ok()) return 1;
    return says(got.status(), "says it has 8000000 files") ? 0 : 2;
  }, size_t{64} << 20);
  EXPECT_EQ(code, 0);
  for (const char* text : {"kiln-files 1\n999999999999\n", "kiln-files 1\n3\n1\na0\n", "kiln-files 1\n2\n1\na0\n"}) {
    auto got = cache::decode_file_group(text);
    ASSERT_FALSE(got.ok()) << text;
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  }
  // A count within what is left still needs each file whole.
  auto cut = cache::decode_file_group("kiln-files 1\n2\n1\na0\n1\nb5\nab");
  ASSERT_FALSE(cut.ok());
  EXPECT_TRUE(says(cut.status(), "cut short (file 2 of 2)")) << cut.status().message();
  // A name past 255 bytes is refused as it is read.
  std::string long_name(300, 'n');
  auto named = cache::decode_file_group("kiln-files 1\n1\n300\n" + long_name + "0\n");
  ASSERT_FALSE(named.ok());
  EXPECT_TRUE(says(named.status(), "a name of 300 bytes")) << named.status().message();
  // And a group kiln writes reads back.
  cache::NamedFiles files = {{"kernel.cubin", "\x7f" "ELF"}, {"kernel.json", "{}"}};
  auto back = cache::decode_file_group(cache::encode_file_group(cache::views_of(files)));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->size(), 2u);
  cache::NamedFiles too_many(65537);
  for (size_t i = 0; i < too_many.size(); ++i) too_many[i].first = "f" + std::to_string(i);
  EXPECT_FALSE(cache::check_file_names(cache::views_of(too_many)).ok());
}

// ---- Manifests from elsewhere

// An op "probe" in DIR/op whose one header, k.h, holds HEADER.
OpSpec probe_spec(TempDir& dir, const std::string& header) {
  dir.write("op/k.h", header);
  OpSpec spec;
  spec.name = "probe";
  spec.spec_dir = dir / "op";
  spec.spec_path = dir / "op/probe.toml";
  return spec;
}

class ManifestLabelsTest : public ::testing::Test {
 protected:
  void SetUp() override { m_spec = probe_spec(m_dir, "#pragma once\n"); }
  Status check(const std::string& label) {
    return builders::check_manifest_headers({ManifestEntry{label, xxh3_128(label)}}, m_spec);
  }
  TempDir m_dir;
  OpSpec m_spec;
};

TEST_F(ManifestLabelsTest, DevZeroAFifoAndASymlinkToADeviceAreRefusedWithoutBeingRead) {
  ASSERT_EQ(::symlink("/dev/zero", (m_dir / "op/zero.h").c_str()), 0);
  ASSERT_EQ(::mkfifo((m_dir / "op/pipe.h").c_str(), 0600), 0);
  ASSERT_EQ(::mkdir((m_dir / "op/folder.h").c_str(), 0700), 0);
  auto start = Clock::now();
  Status dev_zero = check("/dev/zero");
  EXPECT_EQ(dev_zero.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(says(dev_zero, "'/dev/zero' is outside the folders a compile of probe reads")) << dev_zero.message();
  for (const char* label : {"spec:zero.h", "spec:pipe.h", "spec:folder.h"}) {
    Status st = check(label);
    EXPECT_TRUE(says(st, "is not a regular file")) << label << ": " << st.message();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0);  // a FIFO is not opened
}

TEST_F(ManifestLabelsTest, PathsThatLeaveTheirFolderAndHeadersPastTheCapAreRefused) {
  for (const char* label : {"spec:../../../etc/passwd", "spec:./k.h", "spec:a//k.h", "spec:/etc/passwd", "kiln:../../etc/passwd",
                            "/usr/include/../../etc/passwd", "usr/include/stdio.h", "spec:"}) {
    Status st = check(label);
    EXPECT_TRUE(says(st, "is not a plain path")) << label << ": " << st.message();
  }
  // A sparse file: 64 MiB and one byte, without the disk it would take.
  int fd = ::open((m_dir / "op/huge.h").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, (off_t{64} << 20) + 1), 0);
  ::close(fd);
  Status huge = check("spec:huge.h");
  EXPECT_TRUE(says(huge, "more than a header may be")) << huge.message();
}

TEST_F(ManifestLabelsTest, TheHeadersACompileReadsPass) {
  EXPECT_TRUE(check("spec:k.h").ok()) << check("spec:k.h").message();
  EXPECT_TRUE(check("kiln:kiln/cpu_kernel.h").ok()) << check("kiln:kiln/cpu_kernel.h").message();
  if (::access("/usr/include/stdio.h", R_OK) == 0) {
    EXPECT_TRUE(check("/usr/include/stdio.h").ok());
  }
  EXPECT_TRUE(check("spec:gone.h").ok());  // not here: rehash_manifest makes it a miss
  // An include folder of the spec's flags is one (a library's -isystem: torch's headers).
  m_dir.write("torch/include/torch/extension.h", "");
  EXPECT_FALSE(check(m_dir / "torch/include/torch/extension.h").ok());
  m_spec.flags = {"-isystem", m_dir / "torch/include"};
  EXPECT_TRUE(check(m_dir / "torch/include/torch/extension.h").ok());
}

TEST_F(ManifestLabelsTest, TheManifestOfARealCompileThatReadsSystemHeadersPasses) {
  // tools/bench/specs/system_headers: <cmath>, <vector>, <immintrin.h> (libstdc++, the C library,
  // Clang's resource headers), compiled by the real toolchain; its stored manifest, checked as a
  // remote one is.
  std::string spec_path = testing::bundled_spec_dir() + "/../tools/bench/specs/system_headers.toml";
  auto built = testing::run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "build", spec_path});
  ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
  auto spec = builders::parse_spec_file(absolute_path(spec_path));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto store = Store::open(m_dir / "cache").value();
  int manifests = 0;
  size_t headers = 0;
  for (auto& entry : std::filesystem::recursive_directory_iterator(m_dir / "cache/manifests")) {
    if (entry.path().extension() != ".manifest") continue;
    auto text = store->get_manifest(Hash128::from_hex(entry.path().stem().string()).value());
    ASSERT_TRUE(text.ok() && text->has_value());
    auto manifest = builders::decode_manifest(**text);
    ASSERT_TRUE(manifest.ok()) << manifest.status().message();
    Status st = builders::check_manifest_headers(manifest.value(), spec.value());
    EXPECT_TRUE(st.ok()) << st.message();
    headers += manifest->size();
    ++manifests;
  }
  EXPECT_GE(manifests, 1);
  EXPECT_GT(headers, 50u);  // system headers, not only the op's own
}

TEST_F(ManifestLabelsTest, AManifestPastItsBoundsIsRefusedBeforeItIsDecoded) {
  std::string line = "spec:k.h\t" + xxh3_128("x").hex() + "\n";
  std::string big;
  while (big.size() <= (size_t{16} << 20)) big += line;
  EXPECT_EQ(builders::decode_manifest(big).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(builders::decode_manifest(std::string(5000, 'a') + "\t" + xxh3_128("x").hex() + "\n").status().code(),
            StatusCode::kDataLoss);
  EXPECT_TRUE(builders::decode_manifest(line).ok());
}

// ---- Remote artifacts: checked in memory, kept only when every check passed

#define REQUIRE_REDIS() \
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)"

class RemoteCheckBeforeKeepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_spec = probe_spec(m_dir, "#pragma once\nconstexpr int k = 1;\n");
    m_input.key = xxh3_128("the inputs of probe");
    m_headers = builders::rehash_manifest({ManifestEntry{"spec:k.h", {}}}, m_spec).value();
    m_manifest = builders::encode_manifest(m_headers);
    m_key = builders::artifact_key(m_input, m_headers).key;
  }
  std::unique_ptr<RemoteTiers> tiers(const std::string& url) {
    cache::RemoteOptions o;
    o.tiers = cache::parse_tiers(url).value();
    o.trust.secret = "cluster secret";
    o.connect_timeout = std::chrono::milliseconds(500);
    o.io_timeout = std::chrono::milliseconds(2000);
    return RemoteTiers::create(std::move(o)).value();
  }
  // The record an honest publisher of a CPU op would write.
  ArtifactRecord record(const std::string& content) const {
    ArtifactRecord r;
    r.key = m_key;
    r.input_key = m_input.key;
    r.manifest = m_manifest;
    r.op = "probe";
    r.target = "cpu:x86-64-v3";
    r.kind = "host-so";
    r.toolchain = "clang test";
    r.size = content.size();
    r.created = 1;
    return r;
  }
  void publish(RemoteTiers& t, const std::string& manifest, const ArtifactRecord& r, const std::string& content) {
    t.publish({{RemoteObject::kManifest, m_input.key, manifest},
               {RemoteObject::kArtifact, r.key, cache::encode_blob(content, cache::encode_record(r)).bytes}});
    t.drain();
  }
  static int64_t rejected(RemoteTiers& t) {
    int64_t n = 0;
    for (auto& v : t.take_counters())
      if (v.counter == cache::TierCounter::kRejected) n += v.value;
    return n;
  }
  // Looks the op up as Ops does for a CPU target: nullopt when refused. Then: is it in the store?
  std::optional<builders::RemoteArtifact> look(RemoteTiers& t, Store& store) {
    return builders::fetch_through_manifest(t, store, m_input, m_spec, builders::expected_op_artifact("cpu:x86-64-v3"));
  }
  static bool kept(Store& store, const Hash128& key) {
    auto got = store.get(key);
    return (got.ok() && got->has_value()) || ::access(store.blob_path(key).c_str(), F_OK) == 0;
  }

  TempDir m_dir;
  OpSpec m_spec;
  KeyParts m_input;
  std::vector<ManifestEntry> m_headers;
  std::string m_manifest;
  Hash128 m_key;
};

TEST_F(RemoteCheckBeforeKeepTest, AnArtifactCompiledFromOtherInputsIsRefusedAndNotInTheStoreAfterwards) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  auto publisher = tiers(redis.url());
  ArtifactRecord forged = record("a library whose constructor writes a marker");
  forged.input_key = xxh3_128("other inputs");
  publish(*publisher, m_manifest, forged, "a library whose constructor writes a marker");
  auto store = Store::open(m_dir / "store").value();
  auto reader = tiers(redis.url());
  EXPECT_FALSE(look(*reader, *store));
  EXPECT_GE(rejected(*reader), 1);
  EXPECT_FALSE(kept(*store, m_key));
  // The next lookup, here or from the store, finds nothing either.
  EXPECT_FALSE(look(*reader, *store));
  EXPECT_FALSE(kept(*store, m_key));
}

TEST_F(RemoteCheckBeforeKeepTest, ACubinUnderACpuOpsKeyIsRefusedAndNotInTheStoreAfterwards) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  auto publisher = tiers(redis.url());
  ArtifactRecord cubin = record("\x7f" "ELF cubin");
  cubin.kind = "cuda-module";
  publish(*publisher, m_manifest, cubin, "\x7f" "ELF cubin");
  auto store = Store::open(m_dir / "store").value();
  auto reader = tiers(redis.url());
  EXPECT_FALSE(look(*reader, *store));
  EXPECT_GE(rejected(*reader), 1);
  EXPECT_FALSE(kept(*store, m_key));
  // The kinds an op's lookup expects, by target.
  EXPECT_EQ(builders::expected_op_artifact("cpu:x86-64-v3").kinds, (std::vector<std::string>{"host-so", "compile-error"}));
  EXPECT_EQ(builders::expected_op_artifact("cuda:sm_90").kinds, (std::vector<std::string>{"cuda-module", "compile-error"}));
}

TEST_F(RemoteCheckBeforeKeepTest, AnArtifactForAnotherTargetOrWithAnotherManifestIsRefused) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  auto publisher = tiers(redis.url());
  auto store = Store::open(m_dir / "store").value();
  auto reader = tiers(redis.url());
  ArtifactRecord other_target = record("host code for v4");
  other_target.target = "cpu:x86-64-v4";
  publish(*publisher, m_manifest, other_target, "host code for v4");
  EXPECT_FALSE(look(*reader, *store));
  EXPECT_FALSE(kept(*store, m_key));
  // Its manifest would become this store's for the input key: it must be the one that leads here.
  ArtifactRecord other_manifest = record("host code");
  other_manifest.manifest = "/dev/zero\t" + xxh3_128("").hex() + "\n";
  publish(*publisher, m_manifest, other_manifest, "host code");
  EXPECT_FALSE(look(*reader, *store));
  EXPECT_FALSE(kept(*store, m_key));
  auto manifest_here = store->get_manifest(m_input.key);
  EXPECT_TRUE(manifest_here.ok() && !manifest_here->has_value());
}

TEST_F(RemoteCheckBeforeKeepTest, AnArtifactThatPassesEveryCheckIsKeptWithItsManifest) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  auto publisher = tiers(redis.url());
  publish(*publisher, m_manifest, record("host code"), "host code");
  auto store = Store::open(m_dir / "store").value();
  auto reader = tiers(redis.url());
  auto got = look(*reader, *store);
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->fetched);
  EXPECT_EQ(got->artifact.bytes, "host code");
  EXPECT_TRUE(kept(*store, m_key));
  EXPECT_EQ(store->get_manifest(m_input.key).value().value_or(""), m_manifest);
}

TEST_F(RemoteCheckBeforeKeepTest, ARemoteManifestNamingDevZeroIsRefusedQuicklyAndNothingIsRead) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  std::string bomb = "/dev/zero\t" + xxh3_128("").hex() + "\n" + m_manifest;
  {
    auto publisher = tiers(redis.url());
    publisher->publish({{RemoteObject::kManifest, m_input.key, bomb}});
    publisher->drain();
  }
  // In a child under the address-space limit: read, /dev/zero ran until bad_alloc.
  std::string store_dir = m_dir / "store";
  int code = run_with_address_space_limit([&] {
    auto store = Store::open(store_dir).value();
    auto reader = tiers(redis.url());
    auto start = Clock::now();
    bool found = look(*reader, *store).has_value();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (found) return 1;
    if (rejected(*reader) < 1) return 2;
    return seconds < 5 ? 0 : 3;
  }, size_t{512} << 20);  // room for the tiers' threads; /dev/zero read whole would still pass it
  EXPECT_EQ(code, 0) << "1: found, 2: not counted as rejected, 3: slow, " << k_out_of_memory << ": it allocated past 128 MiB";
}

}  // namespace
}  // namespace kiln
