// ZeRO's policy (what each stage shards) and partition layout: units grouped up to a size or one per
// layer, chunks padded to the world size, offsets of units, layers and a rank's chunks, and the
// owned part of a tensor that straddles chunks.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "zero/layout.h"
#include "zero/policy.h"

using namespace ds::zero;

TEST_CASE("policy: each stage shards what the one before it did and one thing more") {
  const Policy p0 = Policy::for_stage(0), p1 = Policy::for_stage(1), p2 = Policy::for_stage(2), p3 = Policy::for_stage(3);
  CHECK((!p0.optimizer_state && !p0.gradients && !p0.parameters));
  CHECK((p1.optimizer_state && !p1.gradients && !p1.parameters));
  CHECK((p2.optimizer_state && p2.gradients && !p2.parameters));
  CHECK((p3.optimizer_state && p3.gradients && p3.parameters));
  for (int s = 0; s <= 3; ++s) CHECK(Policy::for_stage(s).stage() == s);
  CHECK_THROWS_WITH_AS(Policy::for_stage(4), "ZeRO stage 4 is not 0-3", std::invalid_argument);
  CHECK_THROWS_AS(Policy::for_stage(-1), std::invalid_argument);
}

TEST_CASE("layout: consecutive layers share a unit up to the size, a bigger layer is a unit of its own") {
  const std::vector<size_t> layers{3, 4, 10, 2, 2};
  const PartitionLayout l0(layers, 8, false, 2, 0), l1(layers, 8, false, 2, 1);
  const auto& u = l0.units();
  REQUIRE(u.size() == 3);
  // unit 0: layers 0-1 (7 elements, chunks of 4, padded to 8); unit 1: layer 2 alone (10, 5, 10);
  // unit 2: layers 3-4 (4, 2, 4).
  CHECK((u[0].first_layer == 0 && u[0].end_layer == 2 && u[0].size == 7 && u[0].chunk == 4 && u[0].padded() == 8));
  CHECK((u[1].first_layer == 2 && u[1].end_layer == 3 && u[1].size == 10 && u[1].chunk == 5 && u[1].begin == 8));
  CHECK((u[2].first_layer == 3 && u[2].end_layer == 5 && u[2].size == 4 && u[2].chunk == 2 && u[2].begin == 18));
  CHECK(l0.full_size() == 22);
  CHECK(l0.partition_size() == 11);
  CHECK(std::vector<size_t>{u[0].part_offset, u[1].part_offset, u[2].part_offset} == std::vector<size_t>{0, 4, 9});
  CHECK(std::vector<size_t>{l0.layer_begin(0), l0.layer_begin(1), l0.layer_begin(2), l0.layer_begin(3),
                            l0.layer_begin(4)} == std::vector<size_t>{0, 3, 8, 18, 20});
  CHECK(l0.unit_index(4) == 2);
  CHECK(l0.owned_begin(u[1]) == 8);
  CHECK(l1.owned_begin(l1.units()[1]) == 13);
  CHECK(l1.owned_begin(l1.units()[2]) == 20);
}

TEST_CASE("layout: stage 3 makes a unit of every layer and one rank pads nothing") {
  const std::vector<size_t> layers{3, 4, 10};
  const PartitionLayout per_layer(layers, 1000, true, 4, 3);
  REQUIRE(per_layer.units().size() == 3);
  CHECK(per_layer.units()[0].chunk == 1);
  CHECK(per_layer.units()[2].chunk == 3);
  CHECK(per_layer.full_size() == 4 + 4 + 12);
  CHECK(per_layer.partition_size() == 1 + 1 + 3);
  const PartitionLayout single(layers, 5, false, 1, 0);
  CHECK(single.full_size() == 17);
  CHECK(single.partition_size() == 17);
  CHECK_THROWS_AS(PartitionLayout(layers, 5, false, 2, 2), std::invalid_argument);
}

TEST_CASE("layout: the owned part of a tensor straddling two ranks' chunks") {
  // One unit of 10 elements over 3 ranks: chunks of 4 at [0, 4), [4, 8), [8, 12).
  const std::vector<size_t> layers{10};
  for (int r = 0; r < 3; ++r) {
    const PartitionLayout l(layers, 100, false, 3, r);
    const Range part = l.owned_part(3, 6);  // elements [3, 9)
    const std::vector<Range> expected{{3, 1}, {0, 4}, {0, 1}};
    CAPTURE(r);
    CHECK(part.offset == expected[static_cast<size_t>(r)].offset);
    CHECK(part.size == expected[static_cast<size_t>(r)].size);
    CHECK(l.owned_part(0, 0).size == 0);
  }
}
