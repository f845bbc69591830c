// The cache's own costs (issue 3's goals in brackets):
//   BM_IndexLookup/1000000   a record looked up in an index of 1,000,000 artifacts (what
//                            kiln cache show and doctor read; a hit no longer does) [p99 < 50 us]
//   BM_DiskHit100KiB         get() of a 100 KiB artifact: the blob read, zstd, both hashes [< 100 us]
//   BM_Gc/100000             evicting half of 100,000 entries (rows and blob files)
//   BM_Xxh3_128_1MiB         XXH3-128 of 1 MiB (the content check of every read), bytes/s
// Percentiles are reported as counters (p50_us, p99_us) from per-call timings.
#include <benchmark/benchmark.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "cache/blob.h"
#include "cache/store.h"
#include "support/file_util.h"

namespace kiln::cache {
namespace {

std::string temp_dir() {
  char pattern[] = "/tmp/kiln-cache-bench-XXXXXX";
  return ::mkdtemp(pattern);
}

Hash128 nth_key(uint64_t i) { return xxh3_128(&i, sizeof i); }

// Index rows written straight into SQLite (one transaction), with `files` of them also
// given a real blob: put() fsyncs every blob, which would make setup take minutes.
void populate(const std::string& root, uint64_t rows, uint64_t files, size_t blob_bytes) {
  (void)Store::open(root).value()->statistics();  // creates the index (it is opened on first use)
  sqlite3* db = nullptr;
  sqlite3_open((root + "/index.sqlite").c_str(), &db);
  sqlite3_exec(db, "PRAGMA journal_mode=WAL; BEGIN", nullptr, nullptr, nullptr);
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db,
                     "INSERT INTO artifacts(key, op, target, kind, size, stored_size, content_hash, toolchain,"
                     " entry_points, created, last_used, hits, compile_ms, log, components, input_key)"
                     " VALUES(?, 'op', 'cpu:x86-64', 'host-so', ?, ?, x'00', 't', 'e:8', ?, ?, 0, 1.0, '', '', x'00')",
                     -1, &s, nullptr);
  std::string content(blob_bytes, '\0');
  std::mt19937 rng(1);
  for (size_t i = 0; i < content.size(); i += 4) content[i] = static_cast<char>(rng());
  uint64_t total = 0;
  for (uint64_t i = 0; i < rows; ++i) {
    Hash128 key = nth_key(i);
    uint64_t stored = 0;
    if (i < files) {
      ArtifactRecord r;
      r.key = key;
      r.op = "op";
      r.kind = "host-so";
      EncodedBlob blob = encode_blob(content, encode_record(r));
      std::string hex = key.hex();
      std::filesystem::create_directories(root + "/blobs/" + hex.substr(0, 2));
      std::ofstream(root + "/blobs/" + hex.substr(0, 2) + "/" + hex + ".blob", std::ios::binary) << blob.bytes;
      stored = blob.bytes.size();
    }
    total += stored;
    sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, static_cast<int64_t>(i < files ? content.size() : 0));
    sqlite3_bind_int64(s, 3, static_cast<int64_t>(stored));
    sqlite3_bind_int64(s, 4, static_cast<int64_t>(i));
    sqlite3_bind_int64(s, 5, static_cast<int64_t>(i));
    sqlite3_step(s);
    sqlite3_reset(s);
  }
  sqlite3_finalize(s);
  std::string update = "UPDATE stats SET value = " + std::to_string(total) + " WHERE name = 'bytes'; COMMIT";
  sqlite3_exec(db, update.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

void report_percentiles(benchmark::State& state, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[us.size() * 99 / 100];
}

void BM_IndexLookup(benchmark::State& state) {
  static std::string root;
  if (root.empty()) {
    root = temp_dir();
    populate(root, static_cast<uint64_t>(state.range(0)), 0, 0);
  }
  auto store = Store::open(root).value();
  std::mt19937_64 rng(7);
  std::vector<double> us;
  for (auto _ : state) {
    Hash128 key = nth_key(rng() % static_cast<uint64_t>(state.range(0)));
    auto t0 = std::chrono::steady_clock::now();
    auto r = store->record(key);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!r.ok() || !r->has_value()) state.SkipWithError("lookup failed");
  }
  report_percentiles(state, us);
}
BENCHMARK(BM_IndexLookup)->Arg(1000000)->Iterations(200000)->Unit(benchmark::kMicrosecond);

void BM_DiskHit100KiB(benchmark::State& state) {
  std::string root = temp_dir();
  auto store = Store::open(root).value();
  // 100 KiB of real machine code (from libLLVM's .text, 1.6x with zstd -1), else a synthetic
  // stand-in that compresses about as well.
  std::string content;
  auto llvm = read_file("/usr/lib/llvm-22/lib/libLLVM.so.22.1");
  if (llvm.ok() && llvm->size() > (100 << 20)) {
    content = llvm->substr(0x4d30040 + (16 << 20), 100 * 1024);
  } else {
    content.assign(100 * 1024, '\0');
    std::mt19937 rng(3);
    for (size_t i = 0; i < content.size(); i += 2) content[i] = static_cast<char>(rng() % 64);
  }
  ArtifactRecord r;
  r.key = nth_key(42);
  r.op = "op";
  r.target = "cpu:x86-64";
  r.kind = "host-so";
  (void)store->put(r, content);
  std::vector<double> us;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto a = store->get(r.key);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!a.ok() || !a->has_value()) state.SkipWithError("miss");
  }
  report_percentiles(state, us);
  std::filesystem::remove_all(root);
}
BENCHMARK(BM_DiskHit100KiB)->Unit(benchmark::kMicrosecond);

// XXH3-128 of 1 MiB (what checking a blob's content costs per MiB): bytes_per_second.
void BM_Xxh3_128_1MiB(benchmark::State& state) {
  std::string data(1 << 20, '\0');
  std::mt19937_64 rng(7);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  for (auto _ : state) benchmark::DoNotOptimize(xxh3_128(data.data(), data.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(data.size()));
}
BENCHMARK(BM_Xxh3_128_1MiB)->Unit(benchmark::kMicrosecond);

void BM_Gc(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    std::string root = temp_dir();
    uint64_t n = static_cast<uint64_t>(state.range(0));
    populate(root, n, n, 256);
    auto store = Store::open(root).value();
    uint64_t half = store->statistics()->bytes / 2;
    state.ResumeTiming();
    auto report = store->gc(half);
    state.PauseTiming();
    bool evicted_half = report.ok() && report->evicted >= n / 2 - 1;
    std::filesystem::remove_all(root);
    if (!evicted_half) {
      state.SkipWithError("gc did not evict half");
      break;
    }
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Gc)->Arg(100000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln::cache
