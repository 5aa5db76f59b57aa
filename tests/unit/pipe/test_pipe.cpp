// Pipeline parallelism's plan against DeepSpeed's: the rank grid, the partition methods on the
// examples its code gives, and the 1F1B schedule's order and in-flight bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "core/errors.h"
#include "pipe/pipe.h"

using namespace ds::pipe;

TEST_CASE("pipe: the grid is DeepSpeed's pipe x data x model, model fastest") {
  const Topology t{2, 2, 2};
  CHECK(t.world() == 8);
  for (int r = 0; r < 8; ++r) CHECK(t.rank(t.coord(r)) == r);
  CHECK(t.coord(5).pipe == 1);
  CHECK(t.coord(5).data == 0);
  CHECK(t.coord(5).model == 1);
  // DeepSpeed's 2x2x2 pipe groups are [0,4],[1,5],[2,6],[3,7]; filter_match(pipe=0, data=1) = [2,3].
  CHECK(t.pipe_group(1) == std::vector<int>{1, 5});
  CHECK(t.pipe_group(6) == std::vector<int>{2, 6});
  CHECK(t.model_group(2) == std::vector<int>{2, 3});
  CHECK(t.data_group(4) == std::vector<int>{4, 6});
  const Topology pipe_data{2, 3, 1};  // PipeDataParallelTopology: rank = pipe * dp + data
  CHECK(pipe_data.data_group(4) == std::vector<int>{3, 4, 5});
  CHECK(pipe_data.pipe_group(4) == std::vector<int>{1, 4});
}

TEST_CASE("pipe: the sequence-parallel axis sits between model and data, as Megatron's tp-cp-dp-pp order") {
  const Topology t{1, 2, 2, 2};  // the Hugging Face 3D example: T x S x D = 2 x 2 x 2
  CHECK(t.world() == 8);
  for (int r = 0; r < 8; ++r) CHECK(t.rank(t.coord(r)) == r);
  CHECK(t.coord(6).data == 1);
  CHECK(t.coord(6).seq == 1);
  CHECK(t.coord(6).model == 0);
  CHECK(t.model_group(6) == std::vector<int>{6, 7});  // tensor-parallel ranks adjacent
  CHECK(t.seq_group(5) == std::vector<int>{5, 7});
  CHECK(t.data_group(5) == std::vector<int>{1, 5});
  CHECK(t.seq_data_group(5) == std::vector<int>{1, 3, 5, 7});  // data-major: index data x S + seq
  const Topology piped{2, 1, 1, 2};
  CHECK(piped.pipe_group(1) == std::vector<int>{1, 3});
  CHECK(piped.seq_group(2) == std::vector<int>{2, 3});
  CHECK(Topology{2, 2, 2}.seq_data_group(5) == Topology{2, 2, 2}.data_group(5));  // S = 1: the data group
}

TEST_CASE("pipe: uniform partitions give the first stages the extra layers") {
  CHECK(partition_uniform(10, 4) == std::vector<int>{0, 3, 6, 8, 10});
  CHECK(partition_uniform(8, 4) == std::vector<int>{0, 2, 4, 6, 8});
  CHECK(partition_uniform(2, 4) == std::vector<int>{0, 1, 2, 2, 2});
}

TEST_CASE("pipe: balanced partitions minimise the spread, as DeepSpeed's partition_balanced") {
  std::vector<double> ones(10, 1.0);
  ones.front() = ones.back() = 0.0;
  CHECK(partition_balanced(ones, 4) == std::vector<int>{0, 3, 5, 7, 10});
  CHECK(partition_balanced({1, 1, 1, 10}, 2) == std::vector<int>{0, 3, 4});
  CHECK(partition_balanced({1, 0, 0, 0}, 2) == std::vector<int>{0, 3, 4});
  CHECK(partition_balanced({5, 5}, 2) == std::vector<int>{0, 1, 2});
}

TEST_CASE("pipe: partition by method, with the config key in every error") {
  const std::vector<std::string> names{"embed", "block0", "block1", "block2", "block3", "head"};
  const std::vector<size_t> params{100, 10, 10, 10, 10, 0};
  CHECK(partition("uniform", 2, names, params) == std::vector<int>{0, 3, 6});
  CHECK(partition("parameters", 2, names, params) == std::vector<int>{0, 1, 6});
  CHECK(partition("type:BLOCK", 2, names, params) == std::vector<int>{0, 3, 6});
  CHECK(partition("Uniform", 3, names, params) == std::vector<int>{0, 2, 4, 6});
  CHECK_THROWS_WITH_AS(partition("type:attn", 2, names, params),
                       doctest::Contains("pipeline.partition: 'type:attn' matches none"), ds::ConfigError);
  CHECK_THROWS_WITH_AS(partition("type:(", 2, names, params), doctest::Contains("not a regular expression"),
                       ds::ConfigError);
  CHECK_THROWS_WITH_AS(partition("profile", 2, names, params), doctest::Contains("'profile' is not one of"),
                       ds::ConfigError);
  CHECK_THROWS_WITH_AS(partition("uniform", 7, names, params), doctest::Contains("7 stages, but the model has only 6"),
                       ds::ConfigError);
}

TEST_CASE("pipe: 1F1B runs every micro-batch forward then backward, at most stages - stage in flight") {
  for (int stages : {1, 2, 3, 4})
    for (int micro : {1, 2, 3, 4, 7})
      for (int s = 0; s < stages; ++s) {
        CAPTURE(stages);
        CAPTURE(micro);
        CAPTURE(s);
        const std::vector<Op> ops = one_f_one_b(s, stages, micro);
        REQUIRE(ops.size() == static_cast<size_t>(2 * micro));
        int next_f = 0, next_b = 0, peak = 0;
        for (const Op& op : ops) {
          if (op.kind == Op::Forward) CHECK(op.micro == next_f++);
          else CHECK(op.micro == next_b++);
          CHECK(next_b <= next_f);
          peak = std::max(peak, next_f - next_b);
        }
        CHECK(peak == in_flight(s, stages, micro));
      }
  // S=3, M=4, stage 0 as in DeepSpeed's TrainSchedule: F0 F1 F2 B0 F3 B1 B2 B3.
  using O = Op;
  CHECK(one_f_one_b(0, 3, 4) == std::vector<Op>{{O::Forward, 0}, {O::Forward, 1}, {O::Forward, 2}, {O::Backward, 0},
                                                 {O::Forward, 3}, {O::Backward, 1}, {O::Backward, 2}, {O::Backward, 3}});
  // The last stage alternates: F0 B0 F1 B1 ...
  CHECK(one_f_one_b(2, 3, 2) == std::vector<Op>{{O::Forward, 0}, {O::Backward, 0}, {O::Forward, 1}, {O::Backward, 1}});
}
