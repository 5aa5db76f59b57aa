// The SIMT emulator (kernels/simt): CUDA's block and warp semantics on fibers, and the mistakes it
// must catch: a missing barrier (results differ between forward and reverse thread order),
// barrier divergence, warp collectives whose lanes disagree or are missing, shared arrays declared
// differently by different threads, a deadlock between a warp collective and a barrier.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "simt/cuda_subset.h"

using ds::simt::dim3;
using ds::simt::LaunchOptions;
using ds::simt::Order;
using ds::simt::SimtError;

namespace {

LaunchOptions options(Order order, size_t dynamic_shared = 0) {
  LaunchOptions o;
  o.order = order;
  o.dynamic_shared_bytes = dynamic_shared;
  return o;
}

// Reverses `n` values through shared memory; `barrier` false leaves out the __syncthreads between
// the writes and the reads.
std::vector<int> reverse_in_shared(int n, bool barrier, Order order) {
  std::vector<int> in(n), out(n, -1);
  std::iota(in.begin(), in.end(), 100);
  ds::simt::launch(1, n, options(order), [&] {
    DS_SHARED(int, s, 1024);
    const int t = threadIdx.x;
    s[t] = in[t];
    if (barrier) __syncthreads();
    out[t] = s[n - 1 - t];
  });
  return out;
}

}  // namespace

TEST_CASE("simt: indices cover the grid and the block in CUDA's order") {
  const dim3 grid(3, 2, 1), block(4, 2, 3);
  std::vector<int> seen(grid.count() * block.count(), 0);
  std::vector<int> order;
  ds::simt::launch(grid, block, {}, [&] {
    const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    ++seen[b * blockDim.x * blockDim.y * blockDim.z + t];
    if (b == 0) order.push_back(t);
  });
  for (int s : seen) CHECK(s == 1);
  std::vector<int> forward(block.count());
  std::iota(forward.begin(), forward.end(), 0);
  CHECK(order == forward);  // threads start in order of their linear index
}

TEST_CASE("simt: a barrier orders shared memory in both thread orders") {
  for (Order order : {Order::forward, Order::reverse}) {
    const auto out = reverse_in_shared(200, true, order);
    for (int t = 0; t < 200; ++t) REQUIRE(out[t] == 100 + 199 - t);
  }
}

TEST_CASE("simt: a missing barrier shows as a difference between the thread orders") {
  const auto forward = reverse_in_shared(64, false, Order::forward);
  const auto reverse = reverse_in_shared(64, false, Order::reverse);
  CHECK(forward != reverse);
}

TEST_CASE("simt: a thread that ends while others wait at a barrier is barrier divergence") {
  auto kernel = [] {
    if (threadIdx.x == 3) return;
    __syncthreads();
  };
  CHECK_THROWS_WITH_AS(ds::simt::launch(2, 8, {}, kernel),
                       "simt: barrier divergence: block (0,0,0) thread (3,0,0) ended while block (0,0,0) thread "
                       "(0,0,0) waits at __syncthreads (barrier 1)",
                       SimtError);
  // Barriers are counted, not told apart by call site (as on the hardware): thread 0's second
  // barrier pairs with the others' second, and its third finds them gone.
  auto two_barriers = [] {
    __syncthreads();
    if (threadIdx.x == 0) __syncthreads();
    __syncthreads();
  };
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 4, {}, two_barriers),
                       "simt: barrier divergence: block (0,0,0) thread (1,0,0) ended while block (0,0,0) thread "
                       "(0,0,0) waits at __syncthreads (barrier 3)",
                       SimtError);
}

TEST_CASE("simt: warp shuffles and ballot over whole and partial masks") {
  std::vector<float> total(64), down(64);
  std::vector<double> from0(64);
  std::vector<unsigned> votes(64), half(64);
  for (Order order : {Order::forward, Order::reverse}) {
    ds::simt::launch(1, 64, options(order), [&] {
      const int t = threadIdx.x, lane = t % 32;
      float v = static_cast<float>(t);
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      total[t] = v;
      float d = static_cast<float>(lane);
      for (unsigned o = 16; o > 0; o /= 2) d += __shfl_down_sync(0xffffffffu, d, o);
      down[t] = d;
      from0[t] = __shfl_sync(0xffffffffu, 0.5 + t, 0);  // 64-bit: two 32-bit shuffles
      votes[t] = __ballot_sync(0xffffffffu, t % 3 == 0);
      const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;  // two half-warp collectives
      half[t] = __ballot_sync(mask, true);
    });
    for (int t = 0; t < 64; ++t) {
      const int base = t / 32 * 32;
      CHECK(total[t] == static_cast<float>(32 * base + 496));
      if (t % 32 == 0) CHECK(down[t] == 496.0f);
      CHECK(from0[t] == 0.5 + base);
      CHECK(half[t] == (t % 32 < 16 ? 0x0000ffffu : 0xffff0000u));
    }
    CHECK(votes[0] == 0x49249249u);   // lanes 0, 3, 6, ... of threads 0..31
    CHECK(votes[32] == 0x92492492u);  // threads 33, 36, ... are lanes 1, 4, ...
  }
}

TEST_CASE("simt: warp_gather hands every lane all lanes' words, per warp and per mask") {
  std::vector<uint32_t> seen(64 * 64, 0);
  for (Order order : {Order::forward, Order::reverse}) {
    ds::simt::launch(1, 64, options(order), [&] {
      const uint32_t t = threadIdx.x, mine[2] = {t, 1000 + t};
      ds::simt::warp_gather(0xffffffffu, mine, 2, &seen[t * 64]);
    });
    for (int t = 0; t < 64; ++t)
      for (int i = 0; i < 32; ++i) {
        CHECK(seen[t * 64 + 2 * i] == uint32_t(t / 32 * 32 + i));
        CHECK(seen[t * 64 + 2 * i + 1] == uint32_t(1000 + t / 32 * 32 + i));
      }
  }
  uint32_t out[32] = {};
  ds::simt::launch(1, 32, {}, [&] {  // two half-warp gathers; a lane's words from outside its mask stay as they were
    const uint32_t lane = threadIdx.x, mine = 7 * lane;
    uint32_t all[32];
    for (uint32_t& w : all) w = 99;
    ds::simt::warp_gather(lane < 16 ? 0x0000ffffu : 0xffff0000u, &mine, 1, all);
    out[lane] = all[lane < 16 ? 31 : 3] == 99 ? all[(lane + 1) % 32] : 0;
  });
  CHECK(out[0] == 7);
  CHECK(out[15] == 99);  // lane 16 is outside lane 15's mask: left as it was
  CHECK(out[16] == 7 * 17);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {}, [] {
                         uint32_t mine[2] = {}, all[64];
                         ds::simt::warp_gather(0xffffffffu, mine, threadIdx.x == 3 ? 1 : 2, all);
                       }),
                       doctest::Contains("warp_gather"), SimtError);
}

TEST_CASE("simt: warp collectives whose lanes disagree, are missing or wait at a barrier are errors") {
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {}, [] { __shfl_xor_sync(threadIdx.x < 8 ? 0xffu : 0xffffffffu, 1, 1); }),
                       "simt: block (0,0,0) thread (8,0,0): lanes 8 and 0 of a warp disagree: __shfl_xor_sync mask "
                       "0xffffffff (collective 1) and __shfl_xor_sync mask 0x000000ff (collective 1)",
                       SimtError);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {}, [] {
                         if (threadIdx.x == 5) return;
                         __syncwarp();
                       }),
                       "simt: block (0,0,0) thread (0,0,0): __syncwarp waits for lane 5, which has ended", SimtError);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {}, [] {
                         if (threadIdx.x < 16) __shfl_sync(0x0000ffffu, 1, 20);
                       }),
                       "simt: block (0,0,0) thread (0,0,0): __shfl_sync reads lane 20, which is not in the mask "
                       "0x0000ffff",
                       SimtError);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {}, [] { __shfl_sync(0x0000ffffu, 1, 0); }),
                       "simt: block (0,0,0) thread (16,0,0): __shfl_sync with mask 0x0000ffff, which does not name the "
                       "calling lane 16",
                       SimtError);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 16, {}, [] { __syncwarp(); }),
                       doctest::Contains("__syncwarp mask 0xffffffff names lanes that do not exist (the warp has "
                                         "0x0000ffff)"),
                       SimtError);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {}, [] {
                         if (threadIdx.x < 16) __shfl_xor_sync(0xffffffffu, 1, 1);
                         __syncthreads();
                       }),
                       "simt: deadlock: block (0,0,0) thread (0,0,0) waits in __shfl_xor_sync (mask 0xffffffff) for "
                       "lanes that wait at __syncthreads",
                       SimtError);
}

TEST_CASE("simt: shared arrays are per block and must be declared alike by every thread") {
  std::vector<int> sums(3);
  ds::simt::launch(3, 96, {}, [&] {
    DS_SHARED(int, a, 96);
    DS_SHARED(double, b, 1);
    a[threadIdx.x] = static_cast<int>(blockIdx.x * 1000 + threadIdx.x);
    if (threadIdx.x == 0) *b = 0;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 0; i < 96; ++i) *b += a[i];
      sums[blockIdx.x] = static_cast<int>(*b);
    }
  });
  CHECK(sums == std::vector<int>{4560, 96000 + 4560, 192000 + 4560});
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 4, {}, [] {
                         DS_SHARED(float, a, threadIdx.x == 2 ? 8 : 4);
                         a[0] = 1;
                       }),
                       "simt: block (0,0,0) thread (2,0,0): shared array 1 declared with 32 bytes, but with 16 by "
                       "another thread",
                       SimtError);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 1, {}, [] {
                         DS_SHARED(char, a, 49 * 1024);
                         a[0] = 1;
                       }),
                       doctest::Contains("shared arrays need 50176 bytes, more than the 49152 a block has"), SimtError);
}

TEST_CASE("simt: dynamic shared memory and atomics across blocks") {
  float total = 0;
  ds::simt::launch(4, 32, options(Order::reverse, 32 * sizeof(float)), [&] {
    DS_EXTERN_SHARED(float, s);
    s[threadIdx.x] = 1.0f + blockIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
      float block = 0;
      for (int i = 0; i < 32; ++i) block += s[i];
      atomicAdd(&total, block);
    }
  });
  CHECK(total == 32.0f * (1 + 2 + 3 + 4));
}

TEST_CASE("simt: bad launches and calls outside a kernel are errors") {
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 1025, {}, [] {}),
                       "simt: launch of grid (1,1,1) x block (1025,1,1): a block holds 1 to 1024 threads and the grid "
                       "at least one block",
                       SimtError);
  CHECK_THROWS_WITH_AS(__syncthreads(), "simt: __syncthreads called outside a kernel", SimtError);
  CHECK_THROWS_WITH_AS(ds::simt::launch(1, 2, {}, [] {
                         if (threadIdx.x == 1) throw std::runtime_error("kernel failed");
                       }),
                       "kernel failed", std::runtime_error);
}
