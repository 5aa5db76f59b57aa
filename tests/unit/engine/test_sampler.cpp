// The distributed sampler: shards are disjoint and cover the data, each optimizer step's samples
// across ranks are one slice of the epoch's permutation, and the order depends only on the seed.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "engine/sampler.h"

using ds::DistributedSampler;

TEST_CASE("sampler: ranks get disjoint shards that cover every sample") {
  for (int world : {1, 2, 3, 4}) {
    std::multiset<int64_t> seen;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(12, r, world, 7);
      for (int64_t i : s.indices(0, 0, s.per_rank())) seen.insert(i);
    }
    for (int64_t i = 0; i < 12; ++i) CHECK(seen.count(i) == 1);
  }
}

TEST_CASE("sampler: a global step over N ranks is one slice of the single-rank order") {
  const int world = 4, per_step = 2;  // micro_batch x GAS per rank
  DistributedSampler single(40, 0, 1, 3);
  for (int64_t step = 0; step < 5; ++step) {
    std::vector<int64_t> expected = single.indices(0, step * per_step * world, per_step * world);
    std::vector<int64_t> got;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(40, r, world, 3);
      auto part = s.indices(0, step * per_step, per_step);
      got.insert(got.end(), part.begin(), part.end());
    }
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    CHECK(got == expected);
  }
}

TEST_CASE("sampler: epochs reshuffle and the seed fixes the order") {
  DistributedSampler a(100, 0, 1, 1), b(100, 0, 1, 1), c(100, 0, 1, 2);
  CHECK(a.indices(0, 0, 100) == b.indices(0, 0, 100));
  CHECK(a.indices(0, 0, 100) != c.indices(0, 0, 100));
  CHECK(a.indices(1, 0, 100) != b.indices(0, 0, 100));
}

TEST_CASE("sampler: uneven data is padded by wrapping") {
  DistributedSampler r1(10, 1, 4, 5);
  CHECK(r1.per_rank() == 3);
  CHECK(r1.indices(0, 0, 3).size() == 3);
  CHECK_THROWS(r1.indices(0, 2, 2));
}
