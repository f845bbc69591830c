#include "backends/cpu/worker_pool.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>

namespace kiln::backends::cpu {

WorkerPool::WorkerPool(unsigned threads, bool use_openmp) : m_thread_count(threads), m_use_openmp(use_openmp) {}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  for (auto& t : m_threads) t.join();
}

void WorkerPool::start_threads() {
  m_threads.reserve(m_thread_count);
  for (unsigned i = 0; i < m_thread_count; ++i) m_threads.emplace_back([this] { worker_main(); });
}

uint64_t WorkerPool::work() {
  uint64_t ran = 0;
  for (;;) {
    uint64_t begin = m_next.fetch_add(m_chunk, std::memory_order_relaxed);
    if (begin >= m_count) return ran;
    uint64_t end = std::min(m_count, begin + m_chunk);
    for (uint64_t i = begin; i < end; ++i) m_task(m_context, i);
    ran += end - begin;
  }
}

void WorkerPool::worker_main() {
  uint64_t seen = 0;
  std::unique_lock lock(m_mutex);
  for (;;) {
    m_wake.wait(lock, [&] { return m_stop || m_generation != seen; });
    if (m_stop) return;
    seen = m_generation;
    ++m_active;
    lock.unlock();
    work();
    lock.lock();
    if (--m_active == 0) m_done.notify_all();
  }
}

void WorkerPool::wait_for_helpers(std::unique_lock<std::mutex>& lock) {
  m_done.wait(lock, [&] { return m_active == 0; });
}

void WorkerPool::begin_job(std::unique_lock<std::mutex>& lock, uint64_t count, Task task, void* context, unsigned workers) {
  // A helper that woke late for the previous job may still be reading its fields.
  wait_for_helpers(lock);
  m_task = task;
  m_context = context;
  m_count = count;
  // About 4 chunks per worker balances uneven blocks without hammering the counter.
  m_chunk = std::max<uint64_t>(1, count / (4 * uint64_t{workers}));
  m_next.store(0, std::memory_order_relaxed);
}

namespace {
// The process's OpenMP runtime, found by name among the libraries already loaded (kiln never
// loads one): GNU's libgomp (torch's wheels, DeepSpeed's extensions), LLVM's libomp and Intel's
// libiomp5, which both export libgomp's entry points too.
struct OpenMpRuntime {
  void (*parallel)(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) = nullptr;
  int (*level)() = nullptr;        // omp_get_level: > 0 inside any parallel region, active or not
  int (*max_threads)() = nullptr;  // omp_get_max_threads: the team the caller's next region gets
};

unsigned long long loaded_object_count() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;  // the count is the same in every entry: one is enough
      },
      &adds);
  return adds;
}

const OpenMpRuntime* openmp_runtime() {
  // Looked for again only when a library has been loaded since the last look (torch imported
  // after kiln's first launch); once found it stays: the handle pins it.
  static std::mutex mutex;
  static OpenMpRuntime found;
  static std::atomic<bool> have{false};
  static unsigned long long looked_at = ~0ull;
  if (have.load(std::memory_order_acquire)) return &found;
  std::lock_guard lock(mutex);
  if (have.load(std::memory_order_relaxed)) return &found;
  unsigned long long adds = loaded_object_count();
  if (adds == looked_at) return nullptr;
  looked_at = adds;
  for (const char* name : {"libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so"}) {
    void* handle = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    auto parallel = reinterpret_cast<decltype(found.parallel)>(dlsym(handle, "GOMP_parallel"));
    auto level = reinterpret_cast<decltype(found.level)>(dlsym(handle, "omp_get_level"));
    auto max_threads = reinterpret_cast<decltype(found.max_threads)>(dlsym(handle, "omp_get_max_threads"));
    if (!parallel || !level || !max_threads) {
      dlclose(handle);
      continue;
    }
    found.parallel = parallel;
    found.level = level;
    found.max_threads = max_threads;
    have.store(true, std::memory_order_release);
    return &found;
  }
  return nullptr;
}
}  // namespace

bool WorkerPool::run_on_openmp_team(uint64_t count, Task task, void* context) {
  const OpenMpRuntime* omp = openmp_runtime();
  if (!omp || omp->level() > 0) return false;
  // The team's own size (torch.set_num_threads, OMP_NUM_THREADS), not kiln's: a team of another
  // size makes libgomp end the threads it no longer needs and start them again at torch's next op.
  int team = omp->max_threads();
  if (team < 2) return false;
  unsigned workers = static_cast<unsigned>(team);
  {
    std::unique_lock lock(m_mutex);
    begin_job(lock, count, task, context, workers);
    // m_generation stays: kiln's own helpers sit this one out.
  }
  omp->parallel([](void* self) { static_cast<WorkerPool*>(self)->work(); }, this, workers, 0);
  // A helper of kiln's own that woke late for an earlier job may have joined this one.
  std::unique_lock lock(m_mutex);
  wait_for_helpers(lock);
  return true;
}

void WorkerPool::run(uint64_t count, Task task, void* context, bool waiting_caller) {
  if (count == 0) return;
  std::lock_guard run_lock(m_run_mutex);
  // Small grids are not worth waking anyone for.
  if (m_thread_count == 0 || count == 1) {
    for (uint64_t i = 0; i < count; ++i) task(context, i);
    return;
  }
  if (waiting_caller && m_use_openmp && run_on_openmp_team(count, task, context)) return;
  {
    std::unique_lock lock(m_mutex);
    if (m_threads.empty()) start_threads();
    begin_job(lock, count, task, context, m_thread_count + 1);
    ++m_generation;
  }
  m_wake.notify_all();
  work();
  // Every helper that joined this job must leave it before the job's fields change.
  std::unique_lock lock(m_mutex);
  wait_for_helpers(lock);
}

}  // namespace kiln::backends::cpu
