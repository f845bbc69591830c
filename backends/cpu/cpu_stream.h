// Streams and events of the CPU backend.
//
// A CpuStream is an in-order queue served by its own thread (started on first use). Its
// commands live in a fixed ring with the launch arguments stored inline, so queueing a
// launch allocates nothing. Maps to CUstream; CpuEvent maps to CUevent.
//
// Graphs: between begin_capture() and end_capture() a stream records launches, copies,
// memsets, event records and waits instead of queueing them. The CpuGraph that comes back
// holds those commands with each launch's parameter pointers already resolved; launching it
// queues one command that runs them all on the stream's thread: one hand-off between threads
// instead of one per launch. Maps to CUgraphExec.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/worker_pool.h"
#include "kiln/cpu_kernel.h"
#include "runtime/accelerator.h"

namespace kiln::backends::cpu {

class CpuEvent final : public runtime::Event {
 public:
  // Takes the lock once: a complete() still running on a stream's thread (it may have already
  // made the stream's query() true) finishes before the event goes.
  ~CpuEvent() override;
  bool query() override;
  Status synchronize() override;
  Result<double> elapsed_ms_since(runtime::Event& start) override;

  // Called by a stream: recording returns the ticket that completion later reports.
  uint64_t begin_record();
  uint64_t last_recorded();
  // `finished`, when given, is stored with `finished_value` under the event's lock: whoever
  // sees the completion then also sees the stream that recorded it finished.
  void complete(uint64_t ticket, std::atomic<uint64_t>* finished = nullptr, uint64_t finished_value = 0);
  void wait_for(uint64_t ticket);

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  uint64_t m_recorded = 0;
  uint64_t m_completed = 0;
  std::chrono::steady_clock::time_point m_completed_at;
};

// The most dynamic shared memory one block may have (CUDA's largest is 227 KiB per block; a
// CPU block's scratch lives in its worker's cache, where a few MiB is already too much).
inline constexpr uint32_t k_max_shared_bytes = 64u << 20;
// The most argument bytes and parameters one launch may carry (CUDA allows 32 KiB; CPU
// kernels here take a handful of pointers and scalars).
inline constexpr size_t k_max_arg_bytes = 512;
inline constexpr size_t k_max_params = 64;
// Event records and waits one graph may hold: a launch keeps their tickets in its command.
inline constexpr size_t k_max_graph_event_nodes = k_max_arg_bytes / sizeof(uint64_t);

class CpuGraph;
class CpuStream;

// The live streams of one accelerator, so Accelerator::synchronize can wait for all of them.
struct CpuStreamList {
  std::mutex mutex;
  std::vector<CpuStream*> streams;
};

class CpuStream final : public runtime::Stream {
 public:
  CpuStream(WorkerPool& pool, CpuStreamList& list);
  ~CpuStream() override;

  Status copy_async(void* dst, const void* src, size_t bytes) override;
  Status memset_async(void* dst, int value, size_t bytes) override;
  Status record(runtime::Event& event) override;
  Status wait(runtime::Event& event) override;
  Status synchronize() override;
  bool query() override;
  Status begin_capture() override;
  Result<std::unique_ptr<runtime::Graph>> end_capture() override;

  // Queues the launch; with config.caller_waits, on an idle stream, runs it on the calling
  // thread instead (returning when it is done), holding back whatever is queued meanwhile.
  Status launch(kiln_cpu_entry_fn entry, const runtime::KernelSignature& sig, const runtime::LaunchConfig& config,
                const void* const* args, size_t num_args);

 private:
  // The caller-waits launch: false (nothing run) when the stream is busy or capturing.
  Result<bool> run_on_caller(kiln_cpu_entry_fn entry, const runtime::KernelSignature& sig,
                             const runtime::LaunchConfig& config, const void* const* args, size_t num_args);
  // Blocks while a caller runs a launch of this stream itself; under m_mutex.
  void wait_for_caller(std::unique_lock<std::mutex>& lock);
  Status launch_graph(CpuGraph& graph);

  enum class Op : uint8_t { kLaunch, kCopy, kMemset, kRecord, kWait, kGraph };
  struct Command {
    Op op;
    // launch
    kiln_cpu_entry_fn entry;
    runtime::Dim3 grid, block;
    uint32_t shared_bytes;
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
    // graph
    CpuGraph* graph;
  };
  // Runs one command on the calling thread; `params` (launches only) holds k_max_params slots.
  // `waiting_caller`: that thread is the launch's caller, waiting for it (run_on_caller).
  void execute(const Command& c, void* const* resolved_params, bool waiting_caller = false);
  // A launch's parameter pointers into its argument bytes (k_max_params slots); nothing for
  // other commands.
  static void resolve_params(Command& c, void** params);
  // Fills a launch command's argument bytes; errors leave `c` unusable.
  static Status pack_launch(Command& c, kiln_cpu_entry_fn entry, const runtime::KernelSignature& sig,
                            const runtime::LaunchConfig& config, const void* const* args, size_t num_args);
  static constexpr size_t k_ring_size = 256;

  // Reserves the next slot (waiting while the ring is full); fill it, then publish().
  Command& reserve(std::unique_lock<std::mutex>& lock);
  void publish(std::unique_lock<std::mutex>& lock);
  void serve();
  // Every command goes through here: `fill` (Status(Command&), called under m_mutex) fills a
  // slot of the ring, or, while capturing, a command kept for the graph.
  template <typename Fill>
  Status submit_or_capture(Fill&& fill);

  WorkerPool& m_pool;
  std::mutex m_mutex;
  std::condition_variable m_not_empty, m_not_full, m_drained;
  std::array<Command, k_ring_size> m_ring;
  // One consumer (the stream's thread) and producers serialised by m_mutex. The consumer
  // takes no lock per command: it reads m_tail, runs the command, advances m_head. The
  // atomics are sequentially consistent, which the sleep/wake handshakes below rely on.
  std::atomic<uint64_t> m_head{0};  // next to execute; everything before it has completed
  std::atomic<uint64_t> m_tail{0};  // next free
  // Commands whose effects are done: moves before m_head, and for a record inside the event's
  // lock, so query() is true once the event that closes the queue is (CUDA's order). m_head
  // moves only after complete() has returned: synchronize() and the ring rely on that.
  std::atomic<uint64_t> m_finished{0};
  uint64_t m_executing = 0;  // the consumer's current position (its thread only)
  std::atomic<bool> m_consumer_sleeping{false};  // set under m_mutex before it waits
  std::atomic<int> m_sleepers{0};  // producers or synchronize() waiting under m_mutex
  bool m_stop = false;
  bool m_capturing = false;
  // A thread is running a launch of this stream itself (run_on_caller): set under m_mutex
  // only while nothing is queued; the stream's thread and synchronize() wait it out.
  std::atomic<bool> m_caller_running{false};
  std::condition_variable m_caller_done;
  std::vector<Command> m_captured;
  CpuStreamList& m_list;
  std::thread m_thread;

  friend class CpuGraph;
};

class CpuGraph final : public runtime::Graph {
 public:
  ~CpuGraph() override;
  Status launch(runtime::Stream& stream) override;
  size_t node_count() const { return m_nodes.size(); }

 private:
  friend class CpuStream;
  explicit CpuGraph(std::vector<CpuStream::Command> nodes);
  // Called on a stream's thread; `launch` is the kGraph command with this launch's tickets.
  void replay(CpuStream& stream, const CpuStream::Command& launch);

  std::vector<CpuStream::Command> m_nodes;
  std::vector<size_t> m_event_nodes;  // indices of the record and wait nodes, in order
  std::vector<std::array<void*, k_max_params>> m_params;  // per node, resolved once
  // Replays queued and not yet finished: the destructor waits for them.
  std::mutex m_mutex;
  std::condition_variable m_idle;
  uint64_t m_in_flight = 0;
};

}  // namespace kiln::backends::cpu
