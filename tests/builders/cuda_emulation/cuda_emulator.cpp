#include "tests/builders/cuda_emulation/cuda_emulator.h"

#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <vector>

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
namespace {

constexpr size_t k_stack_bytes = 256 * 1024;  // per thread: kernels keep arrays of float4 on it

enum class State { kRunnable, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  ucontext_t context;
  dim3 index;
  unsigned linear = 0;
  State state = State::kRunnable;
};

// The block being run.
struct Block {
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;  // 32 per warp
  ucontext_t scheduler;
  const std::function<void()>* body = nullptr;
  size_t current = 0;
  std::string error;  // set by a fiber that found the kernel doing something a GPU would not allow
};

Block* g_block = nullptr;
std::vector<std::unique_ptr<char[]>> g_stacks;  // reused from launch to launch

std::string where() {
  const Fiber& f = g_block->fibers[g_block->current];
  return "block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + "), thread (" +
         std::to_string(f.index.x) + "," + std::to_string(f.index.y) + "," + std::to_string(f.index.z) + ")";
}

void entry() {
  Block& b = *g_block;
  try {
    (*b.body)();
  } catch (const std::exception& e) {
    if (b.error.empty()) b.error = e.what();
  }
  b.fibers[b.current].state = State::kDone;
  // uc_link takes it back to the scheduler.
}

// Leaves the calling fiber in `state` until the scheduler releases it.
void wait(State state) {
  Block& b = *g_block;
  Fiber& f = b.fibers[b.current];
  f.state = state;
  swapcontext(&f.context, &b.scheduler);
}

std::string state_list(const Block& b) {
  std::string out;
  int shown = 0;
  for (auto& f : b.fibers) {
    if (shown++ == 8) return out + ", ...";
    const char* s = f.state == State::kDone ? "exited" : f.state == State::kAtBlockBarrier ? "at __syncthreads" : f.state == State::kAtWarpBarrier ? "at a warp barrier" : "runnable";
    out += (out.empty() ? "" : ", ") + std::string("thread ") + std::to_string(f.linear) + " " + s;
  }
  return out;
}

// A kernel that touches memory outside its tensors (a guard page) dies here: say which thread of
// which kernel did, then die of the same signal.
const std::string* g_kernel = nullptr;
void on_fault(int sig) {
  char text[512];
  int n = 0;
  if (g_block && g_kernel)
    n = std::snprintf(text, sizeof text, "cuda emulator: %s touched memory outside its tensors in block (%u,%u,%u), thread (%u,%u,%u)\n",
                      g_kernel->c_str(), blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  if (n > 0) (void)!::write(2, text, static_cast<size_t>(n));
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void block_barrier() {
  if (!g_block) throw EmulationError("__syncthreads outside a launch");
  wait(State::kAtBlockBarrier);
}

void warp_barrier(unsigned mask) {
  if (!g_block) throw EmulationError("a warp operation outside a launch");
  if (mask != 0xffffffffu)
    throw EmulationError("the emulator takes full-warp masks only; " + where() + " gave 0x" + std::to_string(mask));
  wait(State::kAtWarpBarrier);
}

unsigned lane_id() { return g_block->fibers[g_block->current].linear % 32; }
uint64_t* warp_slots() { return g_block->slots.data() + g_block->fibers[g_block->current].linear / 32 * 32; }

void run_grid(dim3 grid, dim3 block, const std::string& kernel, const std::function<void()>& body) {
  const size_t threads = size_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    throw EmulationError(kernel + ": a launch of grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," +
                         std::to_string(grid.z) + ") and block of " + std::to_string(threads) + " threads, which CUDA refuses");
  while (g_stacks.size() < threads) g_stacks.emplace_back(new char[k_stack_bytes]);
  Block b;
  b.body = &body;
  b.slots.assign((threads + 31) / 32 * 32, 0);
  g_block = &b;
  g_kernel = &kernel;
  static const bool handlers = [] {
    ::signal(SIGSEGV, on_fault);
    ::signal(SIGBUS, on_fault);
    return true;
  }();
  (void)handlers;
  gridDim = grid;
  blockDim = block;
  struct Reset {
    ~Reset() { g_block = nullptr; }
  } reset;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = {bx, by, bz};
        b.fibers.assign(threads, Fiber());
        for (size_t t = 0; t < threads; ++t) {
          Fiber& f = b.fibers[t];
          f.linear = static_cast<unsigned>(t);
          f.index = {static_cast<unsigned>(t % block.x), static_cast<unsigned>(t / block.x % block.y),
                     static_cast<unsigned>(t / (size_t{block.x} * block.y))};
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = g_stacks[t].get();
          f.context.uc_stack.ss_size = k_stack_bytes;
          f.context.uc_link = &b.scheduler;
          makecontext(&f.context, entry, 0);
        }
        for (;;) {
          bool ran = false;
          for (size_t t = 0; t < threads; ++t) {
            if (b.fibers[t].state != State::kRunnable) continue;
            b.current = t;
            threadIdx = b.fibers[t].index;
            swapcontext(&b.scheduler, &b.fibers[t].context);
            ran = true;
            if (!b.error.empty()) throw EmulationError(kernel + ", " + where() + ": " + b.error);
          }
          size_t done = 0, at_block = 0;
          for (auto& f : b.fibers) {
            done += f.state == State::kDone;
            at_block += f.state == State::kAtBlockBarrier;
          }
          if (done == threads) break;
          bool released = false;
          if (at_block == threads - done && at_block > 0) {
            if (done > 0)
              throw EmulationError(kernel + ", block " + std::to_string(bx) + ": __syncthreads reached after " + std::to_string(done) +
                                   " of its threads exited (" + state_list(b) + ")");
            for (auto& f : b.fibers) f.state = State::kRunnable;
            released = true;
          }
          for (size_t w = 0; w * 32 < threads; ++w) {
            bool all = w * 32 + 32 <= threads;
            for (size_t t = w * 32; all && t < w * 32 + 32; ++t) all = b.fibers[t].state == State::kAtWarpBarrier;
            if (!all) continue;
            for (size_t t = w * 32; t < w * 32 + 32; ++t) b.fibers[t].state = State::kRunnable;
            released = true;
          }
          if (!ran && !released)
            throw EmulationError(kernel + ", block " + std::to_string(bx) + " can go no further (a warp operation without all 32 lanes, "
                                 "or threads at different barriers): " + state_list(b));
        }
      }
}

}  // namespace emu
