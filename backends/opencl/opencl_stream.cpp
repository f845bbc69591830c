#include "backends/opencl/opencl_stream.h"

#include "backends/opencl/opencl_accelerator.h"

namespace kiln::backends::opencl {

void OpenClEvent::reset(cl_event e) {
  std::lock_guard lock(m_mutex);
  if (m_event) m_acc.cl().clReleaseEvent(m_event);
  m_event = e;
}

OpenClEvent::Held OpenClEvent::hold() {
  std::lock_guard lock(m_mutex);
  if (m_event) m_acc.cl().clRetainEvent(m_event);
  return Held(m_acc.cl(), m_event);
}

bool OpenClEvent::query() {
  Held e = hold();
  if (!e.get()) return true;
  cl_int status = CL_COMPLETE;
  m_acc.cl().clGetEventInfo(e.get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  return status == CL_COMPLETE || status < 0;
}

Status OpenClEvent::synchronize() {
  Held e = hold();
  if (!e.get()) return {};
  cl_event event = e.get();
  KILN_CL_CHECK(m_acc.cl().clWaitForEvents(1, &event), "waiting for an event");
  return {};
}

Result<double> OpenClEvent::elapsed_ms_since(runtime::Event& start) {
  auto* s = dynamic_cast<OpenClEvent*>(&start);
  if (!s) return invalid_argument("elapsed_ms_since: the start event belongs to another accelerator");
  Held a = s->hold(), b = hold();
  if (!a.get() || !b.get()) return invalid_argument("elapsed_ms_since: both events must have been recorded");
  cl_event both[] = {a.get(), b.get()};
  KILN_CL_CHECK(m_acc.cl().clWaitForEvents(2, both), "waiting for the events");
  cl_ulong t0 = 0, t1 = 0;
  KILN_CL_CHECK(m_acc.cl().clGetEventProfilingInfo(a.get(), CL_PROFILING_COMMAND_END, sizeof t0, &t0, nullptr), "timing an event");
  KILN_CL_CHECK(m_acc.cl().clGetEventProfilingInfo(b.get(), CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr), "timing an event");
  return (static_cast<double>(t1) - static_cast<double>(t0)) / 1e6;
}

Status OpenClGraph::launch(runtime::Stream& stream) {
  auto* s = dynamic_cast<OpenClStream*>(&stream);
  if (!s) return invalid_argument("graph launch: the stream belongs to another accelerator");
  for (auto& work : m_work) KILN_RETURN_IF_ERROR(work(*s));
  return {};
}

OpenClStream::OpenClStream(OpenClAccelerator& acc, cl_command_queue q) : m_acc(acc), m_queue(q) { acc.add_queue(q); }

OpenClStream::~OpenClStream() {
  m_acc.cl().clFinish(m_queue);
  if (m_last) m_acc.cl().clReleaseEvent(m_last);
  m_acc.remove_queue(m_queue);
  m_acc.cl().clReleaseCommandQueue(m_queue);
}

const Api& OpenClStream::cl() const { return m_acc.cl(); }

bool OpenClStream::capturing() {
  std::lock_guard lock(m_mutex);
  return m_capturing;
}

Status OpenClStream::submit(CapturedWork work) {
  {
    std::lock_guard lock(m_mutex);
    if (m_capturing) {
      m_captured.push_back(std::move(work));
      return {};
    }
  }
  return work(*this);
}

Status OpenClStream::copy_async(void* dst, const void* src, size_t bytes) {
  return submit([dst, src, bytes](OpenClStream& s) -> Status {
    cl_event done = nullptr;
    KILN_CL_CHECK(s.cl().clEnqueueSVMMemcpy(s.queue(), CL_FALSE, dst, src, bytes, 0, nullptr, &done), "copy_async");
    s.track(done);
    return {};
  });
}

Status OpenClStream::memset_async(void* dst, int value, size_t bytes) {
  return submit([dst, value, bytes](OpenClStream& s) -> Status {
    unsigned char byte = static_cast<unsigned char>(value);
    cl_event done = nullptr;
    KILN_CL_CHECK(s.cl().clEnqueueSVMMemFill(s.queue(), dst, &byte, 1, bytes, 0, nullptr, &done), "memset_async");
    s.track(done);
    return {};
  });
}

Status OpenClStream::record(runtime::Event& event) {
  auto* e = dynamic_cast<OpenClEvent*>(&event);
  if (!e) return invalid_argument("record: the event belongs to another accelerator");
  return submit([e](OpenClStream& s) -> Status {
    cl_event marker = nullptr;
    KILN_CL_CHECK(s.cl().clEnqueueMarkerWithWaitList(s.queue(), 0, nullptr, &marker), "recording an event");
    s.cl().clFlush(s.queue());  // so that another queue waiting on it sees it submitted
    e->reset(marker);
    return {};
  });
}

Status OpenClStream::wait(runtime::Event& event) {
  auto* e = dynamic_cast<OpenClEvent*>(&event);
  if (!e) return invalid_argument("wait: the event belongs to another accelerator");
  return submit([e](OpenClStream& s) -> Status {
    OpenClEvent::Held held = e->hold();
    cl_event marker = held.get();
    if (!marker) return {};  // never recorded: nothing to wait for
    cl_event done = nullptr;
    KILN_CL_CHECK(s.cl().clEnqueueBarrierWithWaitList(s.queue(), 1, &marker, &done), "waiting on an event");
    s.track(done);
    return {};
  });
}

Status OpenClStream::synchronize() {
  KILN_CL_CHECK(cl().clFinish(m_queue), "synchronizing a stream");
  return {};
}

bool OpenClStream::query() {
  // In order: the last command done means all are.
  std::lock_guard lock(m_last_mutex);
  if (!m_last) return true;
  cl().clFlush(m_queue);
  cl_int status = CL_COMPLETE;
  cl().clGetEventInfo(m_last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  return status == CL_COMPLETE || status < 0;
}

void OpenClStream::track(cl_event e) {
  std::lock_guard lock(m_last_mutex);
  if (m_last) cl().clReleaseEvent(m_last);
  m_last = e;
}

Status OpenClStream::begin_capture() {
  std::lock_guard lock(m_mutex);
  if (m_capturing) return invalid_argument("begin_capture: this stream is already capturing");
  m_capturing = true;
  m_captured.clear();
  return {};
}

Result<std::unique_ptr<runtime::Graph>> OpenClStream::end_capture() {
  std::lock_guard lock(m_mutex);
  if (!m_capturing) return invalid_argument("end_capture: this stream is not capturing (call begin_capture first)");
  m_capturing = false;
  return std::unique_ptr<runtime::Graph>(std::make_unique<OpenClGraph>(std::move(m_captured)));
}

}  // namespace kiln::backends::opencl
