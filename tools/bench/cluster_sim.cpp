// One simulated cluster cold start against the tiers named on the command line (real servers,
// started by tools/bench/cluster_sim.py). Each node is a thread with its own local store (a
// real cache::Store in its own folder, removed once the node is ready) and its own RemoteTiers
// (its own connections, breakers and lease holders); `--concurrency` nodes run at once, the
// rest queued (all N are "started" at t=0, each timed from when it runs).
//
// A node readies one job's artifacts in program order, as kiln does on each op's first use:
// for each, the manifest (by input key), then the artifact (by artifact key), imported into its
// store (checked); on a miss it takes the key's lease and "compiles" (sleeps the artifact's
// scaled compile time, then publishes), or waits for the lease's holder (woken by its release).
//
//   kiln_cluster_sim --tiers T --nodes N [--concurrency C] [--ops 13] [--op-bytes 400]
//     [--triton 300] [--triton-bytes 2048] [--pch-bytes 1730000] [--chunk-bytes 10486]
//     [--chunk-threshold 41943] [--poll] [--lease-ms 30000] [--pch-compile-ms 300] [--work DIR]
//   kiln_cluster_sim --tiers T --lease-waiters W --hold-ms H [--poll]
//
// Prints one JSON object on stdout: compiles per key, per-node time to ready, the lease
// requests the nodes made, and wall time. Bytes and requests per endpoint are read from the
// servers themselves by the driver.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/blob.h"
#include "cache/remote.h"
#include "cache/store.h"
#include "support/file_util.h"

using namespace kiln;
using namespace kiln::cache;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string tiers, work = "/tmp/kiln-cluster-sim";
  int nodes = 16, concurrency = 64, ops = 13, triton = 300;
  size_t op_bytes = 400, triton_bytes = 2048, pch_bytes = 1730000, chunk_bytes = 10486, chunk_threshold = 41943;
  int op_compile_ms = 20, triton_compile_ms = 10, pch_compile_ms = 300, lease_ms = 30000;
  bool poll = false;
  int lease_waiters = 0, hold_ms = 3000;
};

struct Job {
  std::string name;
  Hash128 input, key;
  size_t bytes;
  int compile_ms;
};

std::string content(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    out[i] = static_cast<char>(x);
  }
  return out;
}

RemoteOptions remote_options(const Args& a) {
  RemoteOptions o;
  o.tiers = parse_tiers(a.tiers).value();
  // Generous: a thousand threads connecting at once on 2 cores wait for the CPU, not the network.
  o.connect_timeout = std::chrono::milliseconds(5000);
  o.io_timeout = std::chrono::milliseconds(5000);
  o.lease = std::chrono::milliseconds(a.lease_ms);
  o.chunk_bytes = a.chunk_bytes;
  o.chunk_threshold = a.chunk_threshold;
  o.watch_leases = !a.poll;
  return o;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int cold_start(const Args& a) {
  std::vector<Job> jobs;
  auto add = [&](const std::string& name, size_t bytes, int ms) {
    Job j{name, xxh3_128("input " + name), xxh3_128("artifact " + name), bytes, ms};
    jobs.push_back(j);
  };
  for (int i = 0; i < a.ops; ++i) add("op" + std::to_string(i), a.op_bytes, a.op_compile_ms);
  add("torch-pch", a.pch_bytes, a.pch_compile_ms);
  for (int i = 0; i < a.triton; ++i) add("triton" + std::to_string(i), a.triton_bytes, a.triton_compile_ms);

  std::vector<std::atomic<int>> compiles(jobs.size());
  std::atomic<int64_t> lease_requests{0}, woken{0}, waits{0}, failures{0};
  std::vector<double> ready_ms(static_cast<size_t>(a.nodes));
  std::atomic<int> next{0};
  (void)make_dirs(a.work);

  auto run_node = [&](int n) {
    auto start = Clock::now();
    std::string root = a.work + "/node" + std::to_string(n);
    auto store = Store::open(root).value();
    auto tiers = RemoteTiers::create(remote_options(a)).value();
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job& job = jobs[j];
      // The manifest, then the artifact it names, checked and stored here.
      auto look = [&]() -> bool {
        bool manifest = tiers->fetch(RemoteObject::kManifest, job.input, [](std::string_view) { return Status(); });
        if (!manifest) return false;
        return tiers->fetch(RemoteObject::kArtifact, job.key, [&](std::string_view blob) -> Status {
          KILN_ASSIGN_OR_RETURN(Artifact got, store->import(job.key, blob));
          return got.bytes.size() == job.bytes ? Status() : Status(StatusCode::kDataLoss, "wrong size");
        });
      };
      if (look()) continue;
      auto taken = tiers->take_lease(job.input);
      ++lease_requests;
      std::unique_ptr<RemoteTiers::Lease> lease = std::move(taken.lease);
      // Taken: whoever held it before may have published and released since our look.
      if (taken.state == RemoteTiers::LeaseState::kTaken && look()) continue;
      if (taken.state == RemoteTiers::LeaseState::kHeldElsewhere) {
        ++waits;
        auto w = tiers->wait_for_holder(job.input, std::chrono::milliseconds(120000), look);
        lease_requests += w.polls;
        woken += w.woken;
        if (w.state == RemoteTiers::WaitState::kFound) continue;
        lease = std::move(w.lease);
        if (lease && look()) continue;
      }
      // Compile: the scaled compile time, then the artifact as this node's store holds it.
      ++compiles[j];
      std::this_thread::sleep_for(std::chrono::milliseconds(job.compile_ms));
      ArtifactRecord r;
      r.key = job.key;
      r.input_key = job.input;
      r.op = job.name;
      r.target = "cpu:x86-64-v3";
      r.kind = job.name == "torch-pch" ? "pch" : "host-so";
      r.manifest = "m";
      std::string bytes = content(job.bytes, j);
      r.size = bytes.size();
      EncodedBlob blob = encode_blob(bytes, encode_record(r), Compression::kNone);
      if (!store->import(job.key, blob.bytes).ok()) ++failures;
      std::shared_ptr<RemoteTiers::Lease> held(std::move(lease));
      tiers->publish({{RemoteObject::kArtifact, job.key, blob.bytes}, {RemoteObject::kManifest, job.input, r.manifest}},
                     [held]() mutable { held.reset(); });
    }
    tiers->drain();
    ready_ms[static_cast<size_t>(n)] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    store.reset();
    std::string cmd = "rm -rf '" + root + "'";
    if (std::system(cmd.c_str()) != 0) ++failures;
  };

  auto wall_start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min(a.concurrency, a.nodes); ++w)
    workers.emplace_back([&] {
      for (int n; (n = next.fetch_add(1)) < a.nodes;) run_node(n);
    });
  for (auto& t : workers) t.join();
  double wall = std::chrono::duration<double>(Clock::now() - wall_start).count();

  int most = 0, total = 0, keys_over_one = 0;
  for (auto& c : compiles) {
    most = std::max(most, c.load());
    total += c.load();
    keys_over_one += c.load() > 1;
  }
  std::printf(
      "{\"nodes\": %d, \"concurrency\": %d, \"keys\": %zu, \"compiles\": %d, \"max_compiles_per_key\": %d, "
      "\"keys_compiled_more_than_once\": %d, \"ready_ms_p50\": %.1f, \"ready_ms_p99\": %.1f, \"ready_ms_max\": %.1f, "
      "\"wall_s\": %.2f, \"lease_requests\": %lld, \"waits\": %lld, \"woken\": %lld, \"failures\": %lld}\n",
      a.nodes, a.concurrency, jobs.size(), total, most, keys_over_one, percentile(ready_ms, 0.5), percentile(ready_ms, 0.99),
      percentile(ready_ms, 1.0), wall, static_cast<long long>(lease_requests.load()), static_cast<long long>(waits.load()),
      static_cast<long long>(woken.load()), static_cast<long long>(failures.load()));
  return failures.load() ? 1 : 0;
}

// W waiters on one lease held for `hold_ms`: what their waiting costs the tier.
int lease_waiters(const Args& a) {
  Hash128 input = xxh3_128("one lease, many waiters");
  auto holder = RemoteTiers::create(remote_options(a)).value();
  auto lease = holder->take_lease(input);
  if (lease.state != RemoteTiers::LeaseState::kTaken) {
    std::fprintf(stderr, "kiln_cluster_sim: could not take the lease\n");
    return 1;
  }
  std::atomic<bool> published{false};
  std::atomic<int64_t> polls{0}, found{0}, taken{0};
  std::vector<double> late_ms(static_cast<size_t>(a.lease_waiters));
  std::atomic<int64_t> released_ns{0};
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (int i = 0; i < a.lease_waiters; ++i)
    threads.emplace_back([&, i] {
      auto t = RemoteTiers::create(remote_options(a)).value();
      auto r = t->wait_for_holder(input, std::chrono::milliseconds(a.hold_ms * 4), [&] { return published.load(); });
      bool got = r.state == RemoteTiers::WaitState::kFound || r.state == RemoteTiers::WaitState::kTaken;
      late_ms[static_cast<size_t>(i)] =
          got && released_ns.load() ? static_cast<double>(Clock::now().time_since_epoch().count() - released_ns.load()) / 1e6 : -1;
      polls += r.polls;
      found += r.state == RemoteTiers::WaitState::kFound;
      taken += r.state == RemoteTiers::WaitState::kTaken;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
  released_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  published = true;
  lease.lease.reset();
  for (auto& t : threads) t.join();
  double wall = std::chrono::duration<double>(Clock::now() - start).count();
  // Found it, or took the lease after the release (polling: the first to poll after it).
  std::vector<double> ready;
  for (double ms : late_ms)
    if (ms >= 0) ready.push_back(ms);
  std::printf("{\"waiters\": %d, \"hold_ms\": %d, \"poll\": %s, \"requests\": %lld, \"found\": %lld, \"taken\": %lld, "
              "\"after_release_ms_p50\": %.1f, \"after_release_ms_max\": %.1f, \"wall_s\": %.2f}\n",
              a.lease_waiters, a.hold_ms, a.poll ? "true" : "false", static_cast<long long>(polls.load()),
              static_cast<long long>(found.load()), static_cast<long long>(taken.load()), percentile(ready, 0.5), percentile(ready, 1.0), wall);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kiln_cluster_sim: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--tiers") a.tiers = value();
    else if (k == "--work") a.work = value();
    else if (k == "--nodes") a.nodes = std::stoi(value());
    else if (k == "--concurrency") a.concurrency = std::stoi(value());
    else if (k == "--ops") a.ops = std::stoi(value());
    else if (k == "--triton") a.triton = std::stoi(value());
    else if (k == "--op-bytes") a.op_bytes = std::stoul(value());
    else if (k == "--triton-bytes") a.triton_bytes = std::stoul(value());
    else if (k == "--pch-bytes") a.pch_bytes = std::stoul(value());
    else if (k == "--chunk-bytes") a.chunk_bytes = std::stoul(value());
    else if (k == "--chunk-threshold") a.chunk_threshold = std::stoul(value());
    else if (k == "--poll") a.poll = true;
    else if (k == "--lease-ms") a.lease_ms = std::stoi(value());
    else if (k == "--pch-compile-ms") a.pch_compile_ms = std::stoi(value());
    else if (k == "--lease-waiters") a.lease_waiters = std::stoi(value());
    else if (k == "--hold-ms") a.hold_ms = std::stoi(value());
    else {
      std::fprintf(stderr, "kiln_cluster_sim: unknown argument %s (see tools/bench/cluster_sim.cpp)\n", k.c_str());
      return 2;
    }
  }
  if (a.tiers.empty()) {
    std::fprintf(stderr, "kiln_cluster_sim: --tiers is required\n");
    return 2;
  }
  return a.lease_waiters ? lease_waiters(a) : cold_start(a);
}
