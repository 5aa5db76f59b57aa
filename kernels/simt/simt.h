// A CPU SIMT emulator for block-cooperative CUDA kernels, so that they run in ctest on machines
// without a GPU. Each CUDA thread of a block is a fiber on the calling thread; blocks run one after
// another. A fiber runs until it reaches a block barrier (syncthreads), a warp collective (shuffles,
// ballot, warp_sync) or its end; the scheduler then resumes the next fiber, in forward or reverse
// thread order, so a kernel that misses a barrier gives different results in the two orders. The
// blocks run in the same order, so do two blocks that write the same output.
//
// What it checks, each an error (SimtError) naming the block, the thread and what went wrong:
//   - barrier divergence: a thread ends while others of its block wait at a barrier, or threads
//     wait at different barriers (the n-th one for some, the m-th for others);
//   - warp collectives: a lane named in the mask that ends or waits elsewhere, or lanes whose
//     masks disagree;
//   - shared memory: threads of a block declaring different arrays (size or order) at the same
//     place, or asking for more than the block's static plus dynamic budget.
// Kernels are written in the CUDA subset of cuda_subset.h (single source with nvcc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace ds::simt {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr unsigned count() const { return x * y * z; }
};

class SimtError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Order { forward, reverse };

struct LaunchOptions {
  size_t dynamic_shared_bytes = 0;       // extern __shared__ memory of each block
  Order order = Order::forward;          // the order in which blocks run and runnable threads are resumed
  size_t stack_bytes = 256 * 1024;       // each thread's fiber stack
  size_t max_static_shared = 48 * 1024;  // as on the GPU without an opt-in
};

inline constexpr int kWarpSize = 32;

// Runs `kernel` on grid x block threads and returns when every block has finished. An exception a
// thread throws (SimtError included) ends the launch and is rethrown here; the block's other
// threads are abandoned where they wait (their locals are not destroyed).
void launch(dim3 grid, dim3 block, const LaunchOptions& options, const std::function<void()>& kernel);

// Inside a kernel (anywhere else: SimtError).
dim3 thread_idx();
dim3 block_idx();
dim3 block_dim();
dim3 grid_dim();
int lane_id();  // linear thread index % 32

// __syncthreads(): every thread of the block waits here until all have arrived.
void syncthreads();
// The block's array of `count` elements declared at this point of the kernel (the same pointer for
// every thread; threads must declare the same arrays in the same order). As __shared__ memory, it
// holds whatever the previous block left: write before reading.
void* shared_bytes(size_t bytes, size_t align);
template <typename T>
T* shared(size_t count) {
  return static_cast<T*>(shared_bytes(count * sizeof(T), alignof(T)));
}
// extern __shared__: the launch's dynamic_shared_bytes.
void* dynamic_shared();

// Warp collectives over the lanes in `mask` (each lane named must call the same collective).
// The shuffles move 32-bit values; wider ones are moved in 32-bit halves by cuda_subset.h.
uint32_t shfl(uint32_t mask, uint32_t value, int src_lane);
uint32_t shfl_xor(uint32_t mask, uint32_t value, int lane_mask);
uint32_t shfl_down(uint32_t mask, uint32_t value, unsigned delta);
uint32_t shfl_up(uint32_t mask, uint32_t value, unsigned delta);
uint32_t ballot(uint32_t mask, bool predicate);
void warp_sync(uint32_t mask);
// all[i·words .. i·words + words) = lane i's `mine` for every lane i in `mask` (the others' left as
// they were): the register exchange an emulated warp-wide instruction (mma.sync) needs. Every lane
// passes the same `words`.
void warp_gather(uint32_t mask, const uint32_t* mine, int words, uint32_t* all);

}  // namespace ds::simt
