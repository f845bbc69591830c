// Streams and events of the CPU backend.
//
// A CpuStream is an in-order queue served by its own thread (started on first use). Its
// commands live in a fixed ring with the launch arguments stored inline, so queueing a
// launch allocates nothing. Maps to CUstream; CpuEvent maps to CUevent.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "backends/cpu/worker_pool.h"
#include "kiln/cpu_kernel.h"
#include "runtime/accelerator.h"

namespace kiln::backends::cpu {

class CpuEvent final : public runtime::Event {
 public:
  bool query() override;
  Status synchronize() override;
  Result<double> elapsed_ms_since(runtime::Event& start) override;

  // Called by a stream: recording returns the ticket that completion later reports.
  uint64_t begin_record();
  uint64_t last_recorded();
  void complete(uint64_t ticket);
  void wait_for(uint64_t ticket);

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  uint64_t m_recorded = 0;
  uint64_t m_completed = 0;
  std::chrono::steady_clock::time_point m_completed_at;
};

// The most argument bytes and parameters one launch may carry (CUDA allows 32 KiB; CPU
// kernels here take a handful of pointers and scalars).
inline constexpr size_t k_max_arg_bytes = 512;
inline constexpr size_t k_max_params = 64;

class CpuStream final : public runtime::Stream {
 public:
  explicit CpuStream(WorkerPool& pool);
  ~CpuStream() override;

  Status copy_async(void* dst, const void* src, size_t bytes) override;
  Status memset_async(void* dst, int value, size_t bytes) override;
  Status record(runtime::Event& event) override;
  Status wait(runtime::Event& event) override;
  Status synchronize() override;

  Status launch(kiln_cpu_entry_fn entry, const runtime::KernelSignature& sig, runtime::Dim3 grid,
                runtime::Dim3 block, const void* const* args, size_t num_args);

 private:
  enum class Op : uint8_t { kLaunch, kCopy, kMemset, kRecord, kWait };
  struct Command {
    Op op;
    // launch
    kiln_cpu_entry_fn entry;
    runtime::Dim3 grid, block;
    uint16_t num_params;
    std::array<uint16_t, k_max_params> offsets;
    alignas(16) std::array<unsigned char, k_max_arg_bytes> arg_bytes;
    // copy / memset
    void* dst;
    const void* src;
    size_t bytes;
    int value;
    // record / wait
    CpuEvent* event;
    uint64_t ticket;
  };
  static constexpr size_t k_ring_size = 256;

  // Reserves the next slot (waiting while the ring is full); fill it, then publish().
  Command& reserve(std::unique_lock<std::mutex>& lock);
  void publish(std::unique_lock<std::mutex>& lock);
  void serve();
  void execute(Command& c);

  WorkerPool& m_pool;
  std::mutex m_mutex;
  std::condition_variable m_not_empty, m_not_full, m_drained;
  std::array<Command, k_ring_size> m_ring;
  uint64_t m_head = 0;  // next to execute
  uint64_t m_tail = 0;  // next free
  uint64_t m_completed = 0;
  bool m_stop = false;
  std::thread m_thread;
};

}  // namespace kiln::backends::cpu
