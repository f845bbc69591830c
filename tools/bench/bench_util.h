// What the benchmark programs share: a throw-away cache folder, and the launch-overhead loops,
// run the same way on every backend so their figures compare.
#pragma once

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "runtime/accelerator.h"

namespace kiln::bench {

// A fresh folder under /tmp for a benchmark's cache, removed with what is in it at exit.
struct TempCacheDir {
  std::string path;
  TempCacheDir() {
    char pattern[] = "/tmp/kiln-bench-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempCacheDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Each iteration: `count` calls of launch(stream) (one queued launch each), then a synchronize.
template <typename Launch>
void launches_then_synchronize(benchmark::State& state, runtime::Stream& stream, Launch launch, int count) {
  for (auto _ : state) {
    for (int i = 0; i < count; ++i)
      if (!launch(stream).ok()) return state.SkipWithError("launch failed");
    (void)stream.synchronize();
  }
}

// The same `count` launches captured once into a graph; each iteration replays it and
// synchronizes.
template <typename Launch>
void graph_of_launches(benchmark::State& state, runtime::Stream& stream, Launch launch, int count) {
  if (!stream.begin_capture().ok()) return state.SkipWithError("capture failed");
  for (int i = 0; i < count; ++i) (void)launch(stream);
  auto graph = stream.end_capture();
  if (!graph.ok()) return state.SkipWithError(graph.status().message().c_str());
  for (auto _ : state) {
    (void)(*graph)->launch(stream);
    (void)stream.synchronize();
  }
}

}  // namespace kiln::bench
