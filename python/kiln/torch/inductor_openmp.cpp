// Clang's OpenMP entry points (libomp's __kmpc_* API) carried out by GCC's libgomp.
//
// Inductor's C++ kernels are OpenMP code, and torch runs GCC's libgomp: its thread pool is the
// one torch.set_num_threads sizes. Clang lowers `#pragma omp` to calls into LLVM's runtime
// (libomp), which would bring a second pool into the process. kiln compiles this file into
// every Inductor kernel it builds, hidden, so the calls Clang emits land in the libgomp the
// process already runs (the kernel needs libgomp.so.1, as g++'s kernels do) and the kernel
// stays loadable by a process without kiln.
//
// What is here is what Inductor's code generator emits (torch 2.x, torch/_inductor/codegen):
// `parallel [num_threads(n)]`, `for [collapse(k)] [simd] [nowait] [schedule(static[, c])]`,
// `single`, plus `master`, `critical`, reductions and `flush` for hand-written kernels. Static
// schedules split iterations exactly as libgomp does for g++'s kernels, so a thread gets the same
// indices either way (per-thread partial sums combine to the same result).
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#define KILN_OMP_HIDDEN __attribute__((visibility("hidden")))

extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
void GOMP_barrier(void);
bool GOMP_single_start(void);
void GOMP_critical_start(void);
void GOMP_critical_end(void);
void GOMP_critical_name_start(void** name);
void GOMP_critical_name_end(void** name);
int omp_get_thread_num(void);
int omp_get_num_threads(void);
}

namespace {

using kmp_int32 = int32_t;
using Microtask = void (*)(kmp_int32*, kmp_int32*, ...);
// Clang passes each variable a parallel region captures as one pointer argument.
constexpr int k_max_captures = 96;

struct Fork {
  Microtask fn;
  int argc;
  void* args[k_max_captures];
};

// num_threads(n) of the next parallel region this thread opens (0: the pool's default).
thread_local unsigned t_pushed_threads = 0;

template <size_t... I>
void call(Microtask fn, kmp_int32* gtid, kmp_int32* btid, void* const* args, std::index_sequence<I...>) {
  using Fn = void (*)(kmp_int32*, kmp_int32*, decltype((void)I, static_cast<void*>(nullptr))...);
  reinterpret_cast<Fn>(fn)(gtid, btid, args[I]...);
}

template <size_t... N>
void call_with(int argc, Microtask fn, kmp_int32* gtid, kmp_int32* btid, void* const* args, std::index_sequence<N...>) {
  (void)((argc == static_cast<int>(N) ? (call(fn, gtid, btid, args, std::make_index_sequence<N>{}), true) : false) || ...);
}

void run_region(void* data) {
  auto* fork = static_cast<Fork*>(data);
  kmp_int32 gtid = omp_get_thread_num(), btid = gtid;
  call_with(fork->argc, fork->fn, &gtid, &btid, fork->args, std::make_index_sequence<k_max_captures + 1>{});
}

// Runs `fn` on a team of `threads` (0: the pool's default) with its captures, taken from `array`
// when Clang passes them as one (parallel if), else from `ap`.
void fork(kmp_int32 argc, Microtask fn, void* const* array, va_list* ap, unsigned threads) {
  if (argc < 0 || argc > k_max_captures) {
    std::fprintf(stderr, "kiln: an OpenMP parallel region captures %d variables; kiln's OpenMP bridge takes at most %d "
                 "(build this kernel with Inductor's own compiler: kiln.torch.inductor.uninstall())\n", argc, k_max_captures);
    std::abort();
  }
  Fork f{fn, argc, {}};
  for (int i = 0; i < argc; ++i) f.args[i] = array ? array[i] : va_arg(*ap, void*);
  GOMP_parallel(run_region, &f, threads, 0);
}

// libomp's schedule types that Clang passes for `for` loops.
constexpr kmp_int32 k_static_chunked = 33;  // every other schedule Clang passes here is static (34)

// Narrows [*lower, *upper] (inclusive, step `incr`) to this thread's share, as libgomp does:
// static: n/nth iterations each, the first n%nth threads one more; static with a chunk: chunks
// dealt round-robin, *stride the distance from one of this thread's chunks to its next.
template <typename T, typename S>
void static_init(kmp_int32 schedule, kmp_int32* last, T* lower, T* upper, S* stride, S incr, S chunk) {
  using U = std::make_unsigned_t<T>;
  const U nth = static_cast<U>(omp_get_num_threads()), tid = static_cast<U>(omp_get_thread_num());
  U trip;
  if (incr > 0) trip = static_cast<U>(*upper - *lower) / static_cast<U>(incr) + 1;
  else trip = static_cast<U>(*lower - *upper) / static_cast<U>(-incr) + 1;
  if (schedule == k_static_chunked && chunk > 0) {
    const U c = static_cast<U>(chunk);
    *stride = static_cast<S>(c * nth) * incr;
    *lower = static_cast<T>(*lower + static_cast<T>(c * tid) * incr);
    *upper = static_cast<T>(*lower + static_cast<T>(c) * incr - incr);
    if (last) *last = ((trip - 1) / c) % nth == tid;
    return;
  }
  U q = trip / nth, t = trip % nth;
  if (tid < t) {
    t = 0;
    ++q;
  }
  const U first = q * tid + t;
  const T old_upper = *upper;
  if (q == 0) {  // no iterations for this thread: an empty range
    *lower = static_cast<T>(old_upper + incr);
    *upper = old_upper;
  } else {
    *lower = static_cast<T>(*lower + static_cast<T>(first) * incr);
    *upper = static_cast<T>(*lower + static_cast<T>(q - 1) * incr);
  }
  *stride = static_cast<S>(trip) * incr;
  if (last) *last = q != 0 && first + q == trip;
}

}  // namespace

extern "C" {
struct ident_t;

KILN_OMP_HIDDEN kmp_int32 __kmpc_global_thread_num(ident_t*) { return omp_get_thread_num(); }

KILN_OMP_HIDDEN void __kmpc_push_num_threads(ident_t*, kmp_int32, kmp_int32 n) { t_pushed_threads = n > 0 ? n : 0; }

KILN_OMP_HIDDEN void __kmpc_fork_call(ident_t*, kmp_int32 argc, Microtask fn, ...) {
  unsigned threads = t_pushed_threads;
  t_pushed_threads = 0;
  va_list ap;
  va_start(ap, fn);
  fork(argc, fn, nullptr, &ap, threads);
  va_end(ap);
}

// `parallel if(cond)`: one thread when the condition is false.
KILN_OMP_HIDDEN void __kmpc_fork_call_if(ident_t*, kmp_int32 argc, Microtask fn, kmp_int32 cond, void* args) {
  unsigned threads = cond ? t_pushed_threads : 1;
  t_pushed_threads = 0;
  fork(argc, fn, static_cast<void* const*>(args), nullptr, threads);  // the captures as one array
}

KILN_OMP_HIDDEN void __kmpc_for_static_init_4(ident_t*, kmp_int32, kmp_int32 s, kmp_int32* last, int32_t* lo, int32_t* up,
                                              int32_t* st, int32_t inc, int32_t chunk) {
  static_init(s, last, lo, up, st, inc, chunk);
}
KILN_OMP_HIDDEN void __kmpc_for_static_init_4u(ident_t*, kmp_int32, kmp_int32 s, kmp_int32* last, uint32_t* lo, uint32_t* up,
                                               int32_t* st, int32_t inc, int32_t chunk) {
  static_init(s, last, lo, up, st, inc, chunk);
}
KILN_OMP_HIDDEN void __kmpc_for_static_init_8(ident_t*, kmp_int32, kmp_int32 s, kmp_int32* last, int64_t* lo, int64_t* up,
                                              int64_t* st, int64_t inc, int64_t chunk) {
  static_init(s, last, lo, up, st, inc, chunk);
}
KILN_OMP_HIDDEN void __kmpc_for_static_init_8u(ident_t*, kmp_int32, kmp_int32 s, kmp_int32* last, uint64_t* lo, uint64_t* up,
                                               int64_t* st, int64_t inc, int64_t chunk) {
  static_init(s, last, lo, up, st, inc, chunk);
}
KILN_OMP_HIDDEN void __kmpc_for_static_fini(ident_t*, kmp_int32) {}

KILN_OMP_HIDDEN void __kmpc_barrier(ident_t*, kmp_int32) { GOMP_barrier(); }

KILN_OMP_HIDDEN kmp_int32 __kmpc_single(ident_t*, kmp_int32) { return GOMP_single_start() ? 1 : 0; }
KILN_OMP_HIDDEN void __kmpc_end_single(ident_t*, kmp_int32) {}

KILN_OMP_HIDDEN kmp_int32 __kmpc_master(ident_t*, kmp_int32) { return omp_get_thread_num() == 0; }
KILN_OMP_HIDDEN void __kmpc_end_master(ident_t*, kmp_int32) {}
KILN_OMP_HIDDEN kmp_int32 __kmpc_masked(ident_t*, kmp_int32, kmp_int32 filter) { return omp_get_thread_num() == filter; }
KILN_OMP_HIDDEN void __kmpc_end_masked(ident_t*, kmp_int32) {}

// A named critical section: Clang's kmp_critical_name is 32 zeroed bytes per name, room for the
// pointer libgomp keeps there.
KILN_OMP_HIDDEN void __kmpc_critical(ident_t*, kmp_int32, int32_t* name) { GOMP_critical_name_start(reinterpret_cast<void**>(name)); }
KILN_OMP_HIDDEN void __kmpc_end_critical(ident_t*, kmp_int32, int32_t* name) { GOMP_critical_name_end(reinterpret_cast<void**>(name)); }

// Reductions: 1 tells Clang's code to combine this thread's partial into the shared variable
// itself, which it does between these calls, here under libgomp's unnamed critical section.
KILN_OMP_HIDDEN kmp_int32 __kmpc_reduce_nowait(ident_t*, kmp_int32, kmp_int32, size_t, void*, void (*)(void*, void*), int32_t*) {
  GOMP_critical_start();
  return 1;
}
KILN_OMP_HIDDEN void __kmpc_end_reduce_nowait(ident_t*, kmp_int32, int32_t*) { GOMP_critical_end(); }
KILN_OMP_HIDDEN kmp_int32 __kmpc_reduce(ident_t* loc, kmp_int32 gtid, kmp_int32 n, size_t size, void* data,
                                       void (*combine)(void*, void*), int32_t* lock) {
  return __kmpc_reduce_nowait(loc, gtid, n, size, data, combine, lock);  // its barrier comes at the end
}
KILN_OMP_HIDDEN void __kmpc_end_reduce(ident_t*, kmp_int32, int32_t*) {
  GOMP_critical_end();
  GOMP_barrier();
}

KILN_OMP_HIDDEN void __kmpc_flush(ident_t*) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
}
