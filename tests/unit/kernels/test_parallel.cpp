// The kernels' thread pool: parallel_for covers every index exactly once in static contiguous
// ranges, small loops stay on the calling thread, and the residual additions (elementwise.h)
// are exact at any thread count and in place.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "cpu/elementwise.h"
#include "cpu/parallel.h"
#include "kernel_test_util.h"

TEST_CASE("parallel_for covers every index once in one contiguous range per thread") {
  const int saved = ds::cpu::threads();
  for (int threads : {1, 2, 3}) {
    ds::cpu::set_threads(threads);
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}, int64_t{100001}}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      ds::cpu::parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(begin, end);
      });
      INFO("threads ", threads, " n ", n);
      CHECK(std::count(hits.begin(), hits.end(), 1) == n);
      CHECK(static_cast<int64_t>(ranges.size()) == std::min<int64_t>(n, threads));
    }
  }
  // A loop under min_per_thread elements per thread runs once, on the calling thread.
  ds::cpu::set_threads(2);
  std::atomic<int> calls{0};
  ds::cpu::parallel_for(1000, 4096, [&](int64_t begin, int64_t end) {
    ++calls;
    CHECK(begin == 0);
    CHECK(end == 1000);
    CHECK(omp_get_thread_num() == 0);
  });
  CHECK(calls == 1);
  ds::cpu::set_threads(saved);
}

TEST_CASE("residual additions are exact at any thread count and in place") {
  const int saved = ds::cpu::threads();
  ds::test::Rng rng(5);
  const int64_t n = 300007;  // several ranges, a ragged end
  const auto a = ds::test::random_vec(rng, n), b = ds::test::random_vec(rng, n);
  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
  for (int threads : {1, 2}) {
    ds::cpu::set_threads(threads);
    std::vector<float> out(static_cast<size_t>(n)), y = a, alias = b;
    ds::cpu::add(a.data(), b.data(), out.data(), n);
    ds::cpu::add_into(y.data(), b.data(), n);
    ds::cpu::add(a.data(), alias.data(), alias.data(), n);
    CHECK(ds::test::bit_identical(out, want));
    CHECK(ds::test::bit_identical(y, want));
    CHECK(ds::test::bit_identical(alias, want));
  }
  ds::cpu::set_threads(saved);
}
