// Streams, events and graphs of the OpenCL backend.
//
// An OpenClStream is an in-order command queue (with profiling, for event timing); maps to
// CUstream. An OpenClEvent is the marker its last record() enqueued; maps to CUevent. Graphs are
// kiln's own, as OpenCL 3.0 has none: between begin_capture() and end_capture() a stream records
// its work (launches with their argument values copied, copies, memsets, event records and
// waits) instead of enqueueing it, and the OpenClGraph that comes back replays that sequence on
// whichever stream it is launched on; maps to CUgraphExec.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/opencl/opencl_api.h"
#include "runtime/accelerator.h"

namespace kiln::backends::opencl {

class OpenClAccelerator;

// An event is the marker its last record() enqueued. A record on one thread may replace it while
// another thread waits on it: readers take their own reference (Held) first.
class OpenClEvent final : public runtime::Event {
 public:
  explicit OpenClEvent(const OpenClAccelerator& acc) : m_acc(acc) {}
  ~OpenClEvent() override { reset(nullptr); }
  void reset(cl_event e);
  // The current marker, retained for as long as the Held lives (null when never recorded).
  class Held {
   public:
    Held(const Api& cl, cl_event e) : m_cl(cl), m_event(e) {}
    Held(const Held&) = delete;
    ~Held() {
      if (m_event) m_cl.clReleaseEvent(m_event);
    }
    cl_event get() const { return m_event; }

   private:
    const Api& m_cl;
    cl_event m_event;
  };
  Held hold();
  bool query() override;
  Status synchronize() override;
  Result<double> elapsed_ms_since(runtime::Event& start) override;

 private:
  const OpenClAccelerator& m_acc;
  std::mutex m_mutex;
  cl_event m_event = nullptr;
};

class OpenClStream;
// One piece of captured work, replayed on whichever stream the graph is launched on.
using CapturedWork = std::function<Status(OpenClStream&)>;

class OpenClGraph final : public runtime::Graph {
 public:
  explicit OpenClGraph(std::vector<CapturedWork> work) : m_work(std::move(work)) {}
  Status launch(runtime::Stream& stream) override;

 private:
  std::vector<CapturedWork> m_work;
};

// Thread-safe: work may be submitted from several threads; a capture records what every thread
// submits until end_capture.
class OpenClStream final : public runtime::Stream {
 public:
  // Takes `q` (released with the stream) and registers it with `acc`, whose synchronize and
  // deallocate wait for it.
  OpenClStream(OpenClAccelerator& acc, cl_command_queue q);
  ~OpenClStream() override;
  cl_command_queue queue() const { return m_queue; }
  const Api& cl() const;

  bool capturing();
  // Runs `work` now, or records it when capturing.
  Status submit(CapturedWork work);
  // Keeps the event of the newest command, for query(); the one before is released.
  void track(cl_event e);

  Status copy_async(void* dst, const void* src, size_t bytes) override;
  Status memset_async(void* dst, int value, size_t bytes) override;
  Status record(runtime::Event& event) override;
  Status wait(runtime::Event& event) override;
  Status synchronize() override;
  bool query() override;
  Status begin_capture() override;
  Result<std::unique_ptr<runtime::Graph>> end_capture() override;

 private:
  OpenClAccelerator& m_acc;
  cl_command_queue m_queue;
  std::mutex m_mutex;
  bool m_capturing = false;
  std::vector<CapturedWork> m_captured;
  std::mutex m_last_mutex;
  cl_event m_last = nullptr;
};

}  // namespace kiln::backends::opencl
