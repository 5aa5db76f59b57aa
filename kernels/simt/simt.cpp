// The SIMT emulator (simt.h): fibers on Boost.Context's fcontext (a switch is a few instructions and no system
// call; ucontext's swapcontext saved the signal mask each time), one scheduler per launch on the calling thread.
#include "simt/simt.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include <boost/context/detail/fcontext.hpp>
#include <fmt/format.h>

#if defined(__SANITIZE_ADDRESS__)
#define DS_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DS_SIMT_ASAN 1
#endif
#endif

#ifdef DS_SIMT_ASAN
// AddressSanitizer must be told when the stack changes under it.
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
extern "C" void __asan_unpoison_memory_region(const volatile void* addr, size_t size);
#endif

namespace ds::simt {
namespace {

namespace fctx = boost::context::detail;

enum class WarpOp { shfl, shfl_xor, shfl_down, shfl_up, ballot, sync, gather };

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::shfl: return "__shfl_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::sync: return "__syncwarp";
    case WarpOp::gather: return "warp_gather";
  }
  return "?";
}

enum class State { runnable, at_barrier, at_warp, done };

struct Fiber {
  fctx::fcontext_t context = nullptr;  // where it resumes
  std::unique_ptr<char[]> stack;
  dim3 index;
  int linear = 0;
  State state = State::runnable;
  uint64_t barriers = 0;      // barriers passed: it waits at barrier number `barriers`
  uint64_t collectives = 0;   // warp collectives done: it waits in number `collectives`
  size_t declarations = 0;    // shared arrays declared so far
  WarpOp op = WarpOp::sync;   // the collective it waits in
  uint32_t mask = 0, value = 0, result = 0;
  int arg = 0;
  const uint32_t* send = nullptr;  // warp_gather: the lane's `arg` words, and where all lanes' go
  uint32_t* receive = nullptr;
  void* fake_stack = nullptr;  // AddressSanitizer's, while switched out
};

struct Declaration {
  size_t bytes, offset;
};

// Shared memory: 128-byte aligned, as the GPU's.
struct AlignedBytes {
  struct alignas(128) Line {
    std::byte bytes[128];
  };
  std::vector<Line> lines;
  void resize(size_t bytes) { lines.resize((bytes + sizeof(Line) - 1) / sizeof(Line)); }
  size_t size() const { return lines.size() * sizeof(Line); }
  std::byte* data() { return lines.empty() ? nullptr : lines.front().bytes; }
};

struct Launch {
  dim3 grid, block, block_index;
  LaunchOptions options;
  const std::function<void()>* kernel = nullptr;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  fctx::fcontext_t scheduler = nullptr;  // where the running fiber returns to
  const void* scheduler_stack = nullptr;  // for AddressSanitizer
  size_t scheduler_stack_size = 0;
  std::exception_ptr error;
  std::vector<Declaration> declarations;  // the block's shared arrays, in order of declaration
  AlignedBytes static_shared, dynamic_shared;
  size_t static_used = 0;
};

thread_local Launch* active = nullptr;

// Fiber stacks outlive a launch, for the thread's next one: a launch of 1024 threads would otherwise allocate
// 256 MiB of stacks each time (and zeroing them cost more than most kernels).
struct StackPool {
  size_t bytes = 0;
  std::vector<std::unique_ptr<char[]>> spare;

  std::unique_ptr<char[]> take(size_t n) {
    if (n != bytes) {
      spare.clear();
      bytes = n;
    }
    if (spare.empty()) return std::unique_ptr<char[]>(new char[n]);  // uninitialised: a fiber touches only its top
    std::unique_ptr<char[]> stack = std::move(spare.back());
    spare.pop_back();
    return stack;
  }
  void give(std::unique_ptr<char[]> stack, size_t n) {
    if (!stack || n != bytes) return;
#ifdef DS_SIMT_ASAN
    __asan_unpoison_memory_region(stack.get(), n);  // a fiber that ended left its last frame's redzones
#endif
    spare.push_back(std::move(stack));
  }
};

thread_local StackPool stack_pool;

Launch& launch_state(const char* what) {
  if (!active || !active->current) throw SimtError(fmt::format("simt: {} called outside a kernel", what));
  return *active;
}

std::string where(const Launch& l, const Fiber& f) {
  return fmt::format("block ({},{},{}) thread ({},{},{})", l.block_index.x, l.block_index.y, l.block_index.z, f.index.x,
                     f.index.y, f.index.z);
}

// Fiber side: back to the scheduler until resumed.
void yield(Launch& l, [[maybe_unused]] Fiber& f) {
#ifdef DS_SIMT_ASAN
  __sanitizer_start_switch_fiber(&f.fake_stack, l.scheduler_stack, l.scheduler_stack_size);
#endif
  l.scheduler = fctx::jump_fcontext(l.scheduler, nullptr).fctx;
#ifdef DS_SIMT_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &l.scheduler_stack, &l.scheduler_stack_size);
#endif
}

void fiber_main(fctx::transfer_t from) {
  Launch& l = *active;
  Fiber& f = *l.current;
  l.scheduler = from.fctx;
#ifdef DS_SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &l.scheduler_stack, &l.scheduler_stack_size);
#endif
  try {
    (*l.kernel)();
  } catch (...) {
    if (!l.error) l.error = std::current_exception();
  }
  f.state = State::done;
#ifdef DS_SIMT_ASAN
  __sanitizer_start_switch_fiber(nullptr, l.scheduler_stack, l.scheduler_stack_size);  // this stack is done
#endif
  fctx::jump_fcontext(l.scheduler, nullptr);  // never resumed
}

// Scheduler side: runs `f` until it waits or ends.
void resume(Launch& l, Fiber& f) {
  l.current = &f;
#ifdef DS_SIMT_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack.get(), l.options.stack_bytes);
#endif
  f.context = fctx::jump_fcontext(f.context, nullptr).fctx;
#ifdef DS_SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  l.current = nullptr;
}

// The lanes of warp `w` that exist (a block's last warp may be partial), as a mask.
uint32_t existing_lanes(const Launch& l, size_t w) {
  const size_t first = w * kWarpSize, count = std::min<size_t>(kWarpSize, l.fibers.size() - first);
  return count == kWarpSize ? 0xffffffffu : (1u << count) - 1;
}

// Every lane waiting in a collective must find the lanes of its mask that wait too waiting in the
// same one (intrinsic, mask and count of collectives so far).
void check_agreement(const Launch& l, const Fiber* lanes, uint32_t exists) {
  for (int i = 0; i < kWarpSize; ++i) {
    if (!(exists >> i & 1) || lanes[i].state != State::at_warp) continue;
    const Fiber& a = lanes[i];
    for (int j = 0; j < kWarpSize; ++j) {
      if (!(a.mask >> j & 1) || !(exists >> j & 1) || lanes[j].state != State::at_warp) continue;
      const Fiber& b = lanes[j];
      if (b.mask != a.mask || b.op != a.op || b.collectives != a.collectives || (a.op == WarpOp::gather && b.arg != a.arg))
        throw SimtError(fmt::format("simt: {}: lanes {} and {} of a warp disagree: {} mask {:#010x} (collective {}) "
                                    "and {} mask {:#010x} (collective {})", where(l, a), i, j, op_name(a.op), a.mask,
                                    a.collectives + 1, op_name(b.op), b.mask, b.collectives + 1));
    }
  }
}

// Completes every warp collective whose lanes have all arrived; true if any did.
bool release_warps(Launch& l) {
  bool released = false;
  const size_t warps = (l.fibers.size() + kWarpSize - 1) / kWarpSize;
  for (size_t w = 0; w < warps; ++w) check_agreement(l, &l.fibers[w * kWarpSize], existing_lanes(l, w));
  for (size_t w = 0; w < warps; ++w) {
    Fiber* lanes = &l.fibers[w * kWarpSize];
    const uint32_t exists = existing_lanes(l, w);
    uint32_t handled = 0;
    for (int i = 0; i < kWarpSize; ++i) {
      if (!(exists >> i & 1) || lanes[i].state != State::at_warp || (handled >> i & 1)) continue;
      const Fiber& first = lanes[i];
      const uint32_t mask = first.mask;
      if (mask & ~exists)
        throw SimtError(fmt::format("simt: {}: {} mask {:#010x} names lanes that do not exist (the warp has {:#010x})",
                                    where(l, first), op_name(first.op), mask, exists));
      bool ready = true;
      for (int j = 0; j < kWarpSize; ++j) {
        if (!(mask >> j & 1)) continue;
        const Fiber& lane = lanes[j];
        if (lane.state == State::done)
          throw SimtError(fmt::format("simt: {}: {} waits for lane {}, which has ended", where(l, first),
                                      op_name(first.op), j));
        if (lane.state != State::at_warp) ready = false;
      }
      if (!ready) continue;
      uint32_t votes = 0;
      for (int j = 0; j < kWarpSize; ++j)
        if ((mask >> j & 1) && lanes[j].value) votes |= 1u << j;
      for (int j = 0; j < kWarpSize; ++j) {
        if (!(mask >> j & 1)) continue;
        Fiber& lane = lanes[j];
        int src = j;
        switch (lane.op) {
          case WarpOp::shfl: src = lane.arg & (kWarpSize - 1); break;
          case WarpOp::shfl_xor: src = j ^ (lane.arg & (kWarpSize - 1)); break;
          case WarpOp::shfl_down: src = j + lane.arg < kWarpSize ? j + lane.arg : j; break;
          case WarpOp::shfl_up: src = j - lane.arg >= 0 ? j - lane.arg : j; break;
          case WarpOp::ballot:
          case WarpOp::sync:
          case WarpOp::gather: break;
        }
        if (!(mask >> src & 1))
          throw SimtError(fmt::format("simt: {}: {} reads lane {}, which is not in the mask {:#010x}", where(l, lane),
                                      op_name(lane.op), src, mask));
        lane.result = lane.op == WarpOp::ballot ? votes : lanes[src].value;
        if (lane.op == WarpOp::gather)
          for (int i = 0; i < kWarpSize; ++i)
            if (mask >> i & 1) std::memcpy(lane.receive + i * lane.arg, lanes[i].send, lane.arg * sizeof(uint32_t));
      }
      for (int j = 0; j < kWarpSize; ++j)
        if (mask >> j & 1) {
          lanes[j].state = State::runnable;
          ++lanes[j].collectives;
        }
      handled |= mask;
      released = true;
    }
  }
  return released;
}

// Releases the block barrier once every thread waits at it; true if it did. (Threads count their
// barriers as the hardware does, not by call site; all are released together, so all that wait wait
// at the same one.)
bool release_barrier(Launch& l) {
  const auto waiting = std::find_if(l.fibers.begin(), l.fibers.end(), [](const Fiber& f) { return f.state == State::at_barrier; });
  if (waiting == l.fibers.end()) return false;
  for (const Fiber& f : l.fibers)
    if (f.state == State::done)
      throw SimtError(fmt::format("simt: barrier divergence: {} ended while {} waits at __syncthreads (barrier {})",
                                  where(l, f), where(l, *waiting), waiting->barriers + 1));
  for (const Fiber& f : l.fibers)
    if (f.state != State::at_barrier) return false;  // some wait in a warp collective first
  for (Fiber& f : l.fibers) {
    f.state = State::runnable;
    ++f.barriers;
  }
  return true;
}

std::string stuck(const Launch& l) {
  for (const Fiber& f : l.fibers)
    if (f.state == State::at_warp)
      return fmt::format("simt: deadlock: {} waits in {} (mask {:#010x}) for lanes that wait at __syncthreads",
                         where(l, f), op_name(f.op), f.mask);
  return "simt: deadlock";
}

void run_block(Launch& l) {
  l.declarations.clear();
  l.static_used = 0;
  const unsigned n = l.block.count();
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = l.fibers[t];
    f.index = dim3(t % l.block.x, t / l.block.x % l.block.y, t / (l.block.x * l.block.y));
    f.linear = static_cast<int>(t);
    f.state = State::runnable;
    f.barriers = f.collectives = 0;
    f.declarations = 0;
    f.context = fctx::make_fcontext(f.stack.get() + l.options.stack_bytes, l.options.stack_bytes, fiber_main);
  }
  for (;;) {
    if (l.options.order == Order::forward) {
      for (unsigned t = 0; t < n && !l.error; ++t)
        if (l.fibers[t].state == State::runnable) resume(l, l.fibers[t]);
    } else {
      for (unsigned t = n; t-- > 0 && !l.error;)
        if (l.fibers[t].state == State::runnable) resume(l, l.fibers[t]);
    }
    if (l.error) std::rethrow_exception(l.error);
    if (std::all_of(l.fibers.begin(), l.fibers.begin() + n, [](const Fiber& f) { return f.state == State::done; }))
      return;
    if (!release_warps(l) && !release_barrier(l)) throw SimtError(stuck(l));
  }
}

uint32_t collective(WarpOp op, uint32_t mask, uint32_t value, int arg, const uint32_t* send = nullptr,
                    uint32_t* receive = nullptr) {
  Launch& l = launch_state(op_name(op));
  Fiber& f = *l.current;
  if (!(mask >> (f.linear % kWarpSize) & 1))
    throw SimtError(fmt::format("simt: {}: {} with mask {:#010x}, which does not name the calling lane {}", where(l, f),
                                op_name(op), mask, f.linear % kWarpSize));
  f.op = op;
  f.mask = mask;
  f.value = value;
  f.arg = arg;
  f.send = send;
  f.receive = receive;
  f.state = State::at_warp;
  yield(l, f);
  return f.result;
}

}  // namespace

void launch(dim3 grid, dim3 block, const LaunchOptions& options, const std::function<void()>& kernel) {
  if (grid.count() == 0 || block.count() == 0 || block.count() > 1024)
    throw SimtError(fmt::format("simt: launch of grid ({},{},{}) x block ({},{},{}): a block holds 1 to 1024 threads "
                                "and the grid at least one block", grid.x, grid.y, grid.z, block.x, block.y, block.z));
  if (active) throw SimtError("simt: launch from inside a kernel");
  Launch l;
  l.grid = grid;
  l.block = block;
  l.options = options;
  l.kernel = &kernel;
  l.fibers.resize(block.count());
  for (Fiber& f : l.fibers) f.stack = stack_pool.take(options.stack_bytes);
  l.static_shared.resize(options.max_static_shared);
  l.dynamic_shared.resize(options.dynamic_shared_bytes);
  active = &l;
  struct Finish {  // no kernel runs on this thread any more; the stacks go back to the pool
    Launch& l;
    ~Finish() {
      active = nullptr;
      for (Fiber& f : l.fibers) stack_pool.give(std::move(f.stack), l.options.stack_bytes);
    }
  } finish{l};
  // Blocks one after another, in the launch's order too: two blocks writing the same place (a race on a
  // GPU, where blocks run in any order) leave different values in the two orders.
  const unsigned blocks = grid.count();
  for (unsigned i = 0; i < blocks; ++i) {
    const unsigned b = options.order == Order::forward ? i : blocks - 1 - i;
    l.block_index = dim3(b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y));
    run_block(l);
  }
}

dim3 thread_idx() { return launch_state("threadIdx").current->index; }
dim3 block_idx() { return launch_state("blockIdx").block_index; }
dim3 block_dim() { return launch_state("blockDim").block; }
dim3 grid_dim() { return launch_state("gridDim").grid; }
int lane_id() { return launch_state("lane_id").current->linear % kWarpSize; }

void syncthreads() {
  Launch& l = launch_state("__syncthreads");
  Fiber& f = *l.current;
  f.state = State::at_barrier;
  yield(l, f);
}

void* shared_bytes(size_t bytes, size_t align) {
  Launch& l = launch_state("__shared__");
  Fiber& f = *l.current;
  const size_t n = f.declarations++;
  if (n < l.declarations.size()) {
    if (l.declarations[n].bytes != bytes)
      throw SimtError(fmt::format("simt: {}: shared array {} declared with {} bytes, but with {} by another thread",
                                  where(l, f), n + 1, bytes, l.declarations[n].bytes));
    return l.static_shared.data() + l.declarations[n].offset;
  }
  const size_t offset = (l.static_used + align - 1) / align * align;
  if (offset + bytes > l.static_shared.size())
    throw SimtError(fmt::format("simt: {}: shared arrays need {} bytes, more than the {} a block has", where(l, f),
                                offset + bytes, l.static_shared.size()));
  l.declarations.push_back({bytes, offset});
  l.static_used = offset + bytes;
  return l.static_shared.data() + offset;
}

void* dynamic_shared() {
  Launch& l = launch_state("extern __shared__");
  return l.dynamic_shared.data();
}

uint32_t shfl(uint32_t mask, uint32_t value, int src_lane) { return collective(WarpOp::shfl, mask, value, src_lane); }
uint32_t shfl_xor(uint32_t mask, uint32_t value, int lane_mask) {
  return collective(WarpOp::shfl_xor, mask, value, lane_mask);
}
uint32_t shfl_down(uint32_t mask, uint32_t value, unsigned delta) {
  return collective(WarpOp::shfl_down, mask, value, static_cast<int>(delta));
}
uint32_t shfl_up(uint32_t mask, uint32_t value, unsigned delta) {
  return collective(WarpOp::shfl_up, mask, value, static_cast<int>(delta));
}
uint32_t ballot(uint32_t mask, bool predicate) { return collective(WarpOp::ballot, mask, predicate ? 1 : 0, 0); }
void warp_sync(uint32_t mask) { collective(WarpOp::sync, mask, 0, 0); }
void warp_gather(uint32_t mask, const uint32_t* mine, int words, uint32_t* all) {
  collective(WarpOp::gather, mask, 0, words, mine, all);
}

}  // namespace ds::simt
