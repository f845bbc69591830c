#include "backends/cpu/cpu_stream.h"

#include <cstring>

namespace kiln::backends::cpu {

// ---- events

CpuEvent::~CpuEvent() { std::lock_guard lock(m_mutex); }

bool CpuEvent::query() {
  std::lock_guard lock(m_mutex);
  return m_completed >= m_recorded;
}

Status CpuEvent::synchronize() {
  std::unique_lock lock(m_mutex);
  uint64_t target = m_recorded;
  m_cv.wait(lock, [&] { return m_completed >= target; });
  return {};
}

Result<double> CpuEvent::elapsed_ms_since(runtime::Event& start_event) {
  auto* start = dynamic_cast<CpuEvent*>(&start_event);
  if (!start) return invalid_argument("elapsed time: the events belong to different accelerators");
  std::chrono::steady_clock::time_point a, b;
  {
    std::lock_guard lock(start->m_mutex);
    if (start->m_recorded == 0 || start->m_completed < start->m_recorded)
      return invalid_argument("elapsed time: the start event has not completed");
    a = start->m_completed_at;
  }
  {
    std::lock_guard lock(m_mutex);
    if (m_recorded == 0 || m_completed < m_recorded) return invalid_argument("elapsed time: the end event has not completed");
    b = m_completed_at;
  }
  return std::chrono::duration<double, std::milli>(b - a).count();
}

uint64_t CpuEvent::begin_record() {
  std::lock_guard lock(m_mutex);
  return ++m_recorded;
}

uint64_t CpuEvent::last_recorded() {
  std::lock_guard lock(m_mutex);
  return m_recorded;
}

void CpuEvent::complete(uint64_t ticket, std::atomic<uint64_t>* finished, uint64_t finished_value) {
  // Notify under the lock: a waiter that sees the completion may destroy the event as soon
  // as it returns, so nothing here may touch the event after the lock is released.
  std::lock_guard lock(m_mutex);
  if (ticket > m_completed) m_completed = ticket;
  if (finished) finished->store(finished_value);
  m_completed_at = std::chrono::steady_clock::now();
  m_cv.notify_all();
}

void CpuEvent::wait_for(uint64_t ticket) {
  std::unique_lock lock(m_mutex);
  m_cv.wait(lock, [&] { return m_completed >= ticket; });
}

// ---- streams

namespace {
// Going to sleep and being woken costs two trips through the kernel, about 20 us each on the
// VMs measured here: more than 50 queued launches. So the stream's thread, when it runs out
// of work, and a caller of synchronize, while the last work finishes, spin this long first.
constexpr auto k_spin = std::chrono::microseconds(50);

template <typename Pred>
bool spin_until(Pred done) {
  auto deadline = std::chrono::steady_clock::now() + k_spin;
  for (unsigned i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
}  // namespace

CpuStream::CpuStream(WorkerPool& pool, CpuStreamList& list) : m_pool(pool), m_list(list) {
  std::lock_guard lock(m_list.mutex);
  m_list.streams.push_back(this);
}

CpuStream::~CpuStream() {
  {
    std::lock_guard lock(m_list.mutex);
    std::erase(m_list.streams, this);
  }
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_not_empty.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

CpuStream::Command& CpuStream::reserve(std::unique_lock<std::mutex>& lock) {
  if (!m_thread.joinable()) m_thread = std::thread([this] { serve(); });
  if (m_tail - m_head >= k_ring_size) {
    ++m_sleepers;  // before the check: the consumer notifies when it sees a sleeper
    m_not_full.wait(lock, [&] { return m_tail - m_head < k_ring_size; });
    --m_sleepers;
  }
  return m_ring[m_tail % k_ring_size];
}

void CpuStream::publish(std::unique_lock<std::mutex>& lock) {
  m_tail.fetch_add(1);
  bool wake = m_consumer_sleeping.load();
  lock.unlock();
  if (wake) m_not_empty.notify_one();
}

void CpuStream::serve() {
  for (;;) {
    uint64_t head = m_head.load();
    if (head == m_tail.load() && !spin_until([&] { return m_tail.load() != head; })) {
      std::unique_lock lock(m_mutex);
      m_consumer_sleeping = true;  // a producer that publishes after this store will notify
      m_not_empty.wait(lock, [&] { return m_stop || m_tail.load() != head; });
      m_consumer_sleeping = false;
      if (m_tail.load() == head) return;  // stopping with nothing queued
    }
    // Queued behind a launch its caller is running itself: after it, as on one queue. (The
    // flag is set under m_mutex while nothing is queued, so once this command is seen, it is.)
    if (m_caller_running.load()) {
      std::unique_lock lock(m_mutex);
      wait_for_caller(lock);
    }
    Command& c = m_ring[head % k_ring_size];
    void* params[k_max_params];
    resolve_params(c, params);
    m_executing = head;
    execute(c, params);  // the slot stays reserved until m_head moves
    m_finished.store(head + 1);
    m_head.store(head + 1);
    if (m_sleepers.load() > 0) {
      std::lock_guard lock(m_mutex);  // a sleeper is waiting, or between its check and its wait
      m_not_full.notify_all();
      m_drained.notify_all();
    }
  }
}

namespace {
struct LaunchContext {
  kiln_cpu_entry_fn entry;
  runtime::Dim3 grid, block;
  uint32_t shared_bytes;
  void* const* params;
};

// Each worker thread's scratch for blocks' dynamic shared memory: grown when a launch asks for
// more than it has, so launches of one size allocate only the first time.
struct SharedScratch {
  void* data = nullptr;
  size_t size = 0;
  ~SharedScratch() { std::free(data); }
  void* get(size_t bytes) {
    if (bytes > size) {
      std::free(data);
      size = (bytes + 63) / 64 * 64;
      data = std::aligned_alloc(64, size);
      if (!data) size = 0;
    }
    return data;
  }
};
thread_local SharedScratch t_shared;

void run_block(void* context, uint64_t index) {
  auto* ctx = static_cast<LaunchContext*>(context);
  kiln_cpu_block b;
  b.shared = ctx->shared_bytes ? t_shared.get(ctx->shared_bytes) : nullptr;
  b.shared_bytes = b.shared ? ctx->shared_bytes : 0;
  b.grid_dim = {ctx->grid.x, ctx->grid.y, ctx->grid.z};
  b.block_dim = {ctx->block.x, ctx->block.y, ctx->block.z};
  b.block_idx.x = static_cast<uint32_t>(index % ctx->grid.x);
  b.block_idx.y = static_cast<uint32_t>(index / ctx->grid.x % ctx->grid.y);
  b.block_idx.z = static_cast<uint32_t>(index / (uint64_t{ctx->grid.x} * ctx->grid.y));
  ctx->entry(&b, ctx->params);
}
}  // namespace

void CpuStream::execute(const Command& c, void* const* params, bool waiting_caller) {
  switch (c.op) {
    case Op::kLaunch: {
      LaunchContext ctx{c.entry, c.grid, c.block, c.shared_bytes, params};
      m_pool.run(c.grid.count(), run_block, &ctx, waiting_caller);
      break;
    }
    case Op::kCopy: std::memmove(c.dst, c.src, c.bytes); break;
    case Op::kMemset: std::memset(c.dst, c.value, c.bytes); break;
    // A record that is the last command queued finishes the stream as it completes the event.
    case Op::kRecord: c.event->complete(c.ticket, &m_finished, m_executing + 1); break;
    case Op::kWait: c.event->wait_for(c.ticket); break;
    case Op::kGraph: c.graph->replay(*this, c); break;
  }
}

void CpuStream::resolve_params(Command& c, void** params) {
  if (c.op == Op::kLaunch)
    for (size_t i = 0; i < c.num_params; ++i) params[i] = c.arg_bytes.data() + c.offsets[i];
}

Status CpuStream::pack_launch(Command& c, kiln_cpu_entry_fn entry, const runtime::KernelSignature& sig,
                              const runtime::LaunchConfig& config, const void* const* args, size_t num_args) {
  size_t offset = 0;
  for (size_t i = 0; i < num_args; ++i) {
    size_t size = sig.param_sizes[i];
    size_t align = size >= 16 ? 16 : size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
    offset = (offset + align - 1) / align * align;
    if (offset + size > k_max_arg_bytes)
      return invalid_argument("kernel " + sig.name + ": arguments exceed " + std::to_string(k_max_arg_bytes) + " bytes");
    std::memcpy(c.arg_bytes.data() + offset, args[i], size);
    c.offsets[i] = static_cast<uint16_t>(offset);
    offset += size;
  }
  c.op = Op::kLaunch;
  c.entry = entry;
  c.grid = config.grid;
  c.block = config.block;
  c.shared_bytes = config.shared_bytes;
  c.num_params = static_cast<uint16_t>(num_args);
  return {};
}

Status CpuStream::launch(kiln_cpu_entry_fn entry, const runtime::KernelSignature& sig, const runtime::LaunchConfig& config,
                         const void* const* args, size_t num_args) {
  if (num_args != sig.param_sizes.size())
    return invalid_argument("kernel " + sig.name + " takes " + std::to_string(sig.param_sizes.size()) +
                            " arguments, launch passed " + std::to_string(num_args));
  if (config.grid.count() == 0 || config.block.count() == 0)
    return invalid_argument("kernel " + sig.name + ": grid and block dimensions must be at least 1");
  if (num_args > k_max_params) return invalid_argument("kernel " + sig.name + ": too many parameters");
  if (config.shared_bytes > k_max_shared_bytes)
    return invalid_argument("kernel " + sig.name + ": " + std::to_string(config.shared_bytes) +
                            " bytes of shared memory per block; the cpu accelerator gives at most " +
                            std::to_string(k_max_shared_bytes));
  if (config.caller_waits) {
    Result<bool> ran = run_on_caller(entry, sig, config, args, num_args);
    if (!ran.ok() || *ran) return ran.status();
  }
  return submit_or_capture([&](Command& c) { return pack_launch(c, entry, sig, config, args, num_args); });
}

void CpuStream::wait_for_caller(std::unique_lock<std::mutex>& lock) {
  m_caller_done.wait(lock, [&] { return !m_caller_running.load(); });
}

Result<bool> CpuStream::run_on_caller(kiln_cpu_entry_fn entry, const runtime::KernelSignature& sig,
                                      const runtime::LaunchConfig& config, const void* const* args, size_t num_args) {
  // Why: a synchronous launch handed to the stream's thread costs two wake-ups, and its blocks
  // run on kiln's threads beside the process's OpenMP threads still spinning after torch's
  // last op; on the caller they run on that team (worker_pool.h).
  Command command;
  {
    std::unique_lock lock(m_mutex);
    if (m_capturing || m_caller_running.load() || m_head.load() != m_tail.load()) return false;
    KILN_RETURN_IF_ERROR(pack_launch(command, entry, sig, config, args, num_args));
    m_caller_running.store(true);
  }
  // Released however execute() leaves (a helper thread that cannot be started throws): a flag
  // left set would hold the stream's queue and every synchronize() for good.
  struct Release {
    CpuStream* s;
    ~Release() {
      {
        std::lock_guard lock(s->m_mutex);
        s->m_caller_running.store(false);
      }
      s->m_caller_done.notify_all();
    }
  } release{this};
  void* params[k_max_params];
  resolve_params(command, params);
  execute(command, params, /*waiting_caller=*/true);
  return true;
}

template <typename Fill>
Status CpuStream::submit_or_capture(Fill&& fill) {
  std::unique_lock lock(m_mutex);
  if (m_capturing) {
    Command c{};
    KILN_RETURN_IF_ERROR(fill(c));
    m_captured.push_back(c);
    return {};
  }
  // A failed fill leaves the reserved slot unpublished: the next reserve reuses it.
  KILN_RETURN_IF_ERROR(fill(reserve(lock)));
  publish(lock);
  return {};
}

Status CpuStream::copy_async(void* dst, const void* src, size_t bytes) {
  return submit_or_capture([&](Command& c) {
    c.op = Op::kCopy;
    c.dst = dst;
    c.src = src;
    c.bytes = bytes;
    return Status{};
  });
}

Status CpuStream::memset_async(void* dst, int value, size_t bytes) {
  return submit_or_capture([&](Command& c) {
    c.op = Op::kMemset;
    c.dst = dst;
    c.value = value;
    c.bytes = bytes;
    return Status{};
  });
}

Status CpuStream::record(runtime::Event& event) {
  auto* e = dynamic_cast<CpuEvent*>(&event);
  if (!e) return invalid_argument("record: the event belongs to another accelerator");
  return submit_or_capture([&](Command& c) {
    c.op = Op::kRecord;
    c.event = e;
    // Captured, its ticket is taken when the graph is launched, as a record made then would.
    c.ticket = m_capturing ? 0 : e->begin_record();
    return Status{};
  });
}

Status CpuStream::wait(runtime::Event& event) {
  auto* e = dynamic_cast<CpuEvent*>(&event);
  if (!e) return invalid_argument("wait: the event belongs to another accelerator");
  // Waits for the latest record made before this call, as cuStreamWaitEvent does (in a
  // graph: before the graph's launch, resolved then).
  uint64_t ticket = e->last_recorded();
  return submit_or_capture([&](Command& c) {
    c.op = Op::kWait;
    c.event = e;
    c.ticket = ticket;
    return Status{};
  });
}

Status CpuStream::synchronize() {
  std::unique_lock lock(m_mutex);
  if (m_capturing) return unavailable("cpu: synchronize on a stream that is capturing a graph is not supported");
  wait_for_caller(lock);  // another thread's launch on this stream, run by that thread
  uint64_t target = m_tail;
  if (m_head >= target) return {};
  lock.unlock();
  if (spin_until([&] { return m_head.load() >= target; })) return {};
  lock.lock();
  ++m_sleepers;
  m_drained.wait(lock, [&] { return m_head >= target; });
  --m_sleepers;
  return {};
}

bool CpuStream::query() { return !m_caller_running.load() && m_finished.load() >= m_tail.load(); }

Status CpuStream::begin_capture() {
  std::lock_guard lock(m_mutex);
  if (m_capturing) return invalid_argument("begin_capture: the stream is already capturing");
  m_capturing = true;
  m_captured.clear();
  return {};
}

Result<std::unique_ptr<runtime::Graph>> CpuStream::end_capture() {
  std::lock_guard lock(m_mutex);
  if (!m_capturing) return invalid_argument("end_capture: the stream is not capturing (call begin_capture first)");
  m_capturing = false;
  std::unique_ptr<CpuGraph> graph(new CpuGraph(std::exchange(m_captured, {})));
  if (graph->m_event_nodes.size() > k_max_graph_event_nodes)
    return unavailable("cpu: a graph may record or wait for events " + std::to_string(k_max_graph_event_nodes) +
                       " times; this capture did " + std::to_string(graph->m_event_nodes.size()));
  return std::unique_ptr<runtime::Graph>(std::move(graph));
}

Status CpuStream::launch_graph(CpuGraph& graph) {
  std::unique_lock lock(m_mutex);
  if (m_capturing) return unavailable("cpu: launching a graph into a stream that is capturing is not supported");
  {
    std::lock_guard g(graph.m_mutex);
    ++graph.m_in_flight;
  }
  Command& c = reserve(lock);
  c.op = Op::kGraph;
  c.graph = &graph;
  // This launch's tickets for the graph's event nodes, in node order, kept in the command's
  // argument bytes (a graph launch has no arguments of its own): a record takes a new ticket
  // now, a wait the latest one recorded by now.
  for (size_t j = 0; j < graph.m_event_nodes.size(); ++j) {
    const Command& node = graph.m_nodes[graph.m_event_nodes[j]];
    uint64_t ticket = node.op == Op::kRecord ? node.event->begin_record() : node.event->last_recorded();
    std::memcpy(c.arg_bytes.data() + j * sizeof(uint64_t), &ticket, sizeof ticket);
  }
  publish(lock);
  return {};
}

// ---- graphs

CpuGraph::CpuGraph(std::vector<CpuStream::Command> nodes) : m_nodes(std::move(nodes)), m_params(m_nodes.size()) {
  // Resolve each launch's parameter pointers once; replays only call.
  for (size_t n = 0; n < m_nodes.size(); ++n) {
    CpuStream::resolve_params(m_nodes[n], m_params[n].data());
    if (m_nodes[n].op == CpuStream::Op::kRecord || m_nodes[n].op == CpuStream::Op::kWait) m_event_nodes.push_back(n);
  }
}

CpuGraph::~CpuGraph() {
  std::unique_lock lock(m_mutex);
  m_idle.wait(lock, [&] { return m_in_flight == 0; });
}

Status CpuGraph::launch(runtime::Stream& stream) {
  auto* s = dynamic_cast<CpuStream*>(&stream);
  if (!s) return invalid_argument("graph launch: the stream belongs to another accelerator");
  return s->launch_graph(*this);
}

void CpuGraph::replay(CpuStream& stream, const CpuStream::Command& launch) {
  size_t event_index = 0;
  for (size_t n = 0; n < m_nodes.size(); ++n) {
    const auto& node = m_nodes[n];
    if (node.op == CpuStream::Op::kRecord || node.op == CpuStream::Op::kWait) {
      uint64_t ticket;
      std::memcpy(&ticket, launch.arg_bytes.data() + event_index++ * sizeof(uint64_t), sizeof ticket);
      // The graph's last node finishes the graph's command, and so maybe the stream.
      if (node.op == CpuStream::Op::kRecord)
        node.event->complete(ticket, n + 1 == m_nodes.size() ? &stream.m_finished : nullptr, stream.m_executing + 1);
      else node.event->wait_for(ticket);
      continue;
    }
    stream.execute(node, m_params[n].data());
  }
  // Under the lock, as in CpuEvent::complete: the destructor may run the moment it can see 0.
  std::lock_guard lock(m_mutex);
  --m_in_flight;
  m_idle.notify_all();
}

}  // namespace kiln::backends::cpu
