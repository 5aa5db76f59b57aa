// parallel: how many threads the CPU kernels use, and the loop splitter they share. The kernels'
// loops and OpenBLAS's GEMMs run on one OpenMP (libgomp) thread pool; see CMakeLists.txt.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace ds::cpu {

// Threads for every later kernel and matmul started from the calling thread (n >= 1).
void set_threads(int n);
// The current count (what set_threads set, else OMP_NUM_THREADS, else the CPUs).
int threads();

// Elements a thread should get at least (~10 µs of simple work), and the rows of `row_elements`
// elements each that make that much: the min_per_thread the kernels pass to parallel_for.
constexpr int64_t kMinElementsPerThread = 16384;
constexpr int64_t min_rows_per_thread(int64_t row_elements) {
  return std::max<int64_t>(1, kMinElementsPerThread / std::max<int64_t>(1, row_elements));
}

// Calls body(begin, end) over [0, n) cut into contiguous ranges, one per thread: range i of p is
// [n·i/p, n·(i+1)/p). Uses at most n / min_per_thread threads (at least one), so small loops stay
// on the calling thread instead of paying ~2 µs to wake the pool. The split depends only on n and
// the thread count, so a body that writes only its own range gives the same bits at any count.
// body must not throw (an exception cannot leave an OpenMP region): validate before the loop.
template <class Body>
void parallel_for(int64_t n, int64_t min_per_thread, Body&& body) {
  if (n <= 0) return;
  const int64_t most = std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread));
  const int p = static_cast<int>(std::min<int64_t>(most, omp_in_parallel() ? 1 : omp_get_max_threads()));
  if (p == 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(p)
  {
    const int64_t i = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t begin = n * i / count, end = n * (i + 1) / count;
    if (begin < end) body(begin, end);
  }
}

}  // namespace ds::cpu
