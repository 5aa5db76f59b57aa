// A step over segments (a rank's scattered chunks at ZeRO stages 1 and 2) is the same step as over
// one contiguous buffer holding the same elements: bit-identical, state included.
#include <doctest/doctest.h>

#include <vector>

#include "optim/optimizer.h"
#include "optim_test_util.h"

using namespace ds;
using ds::test::values;

namespace {

std::unique_ptr<Optimizer> make(OptimizerType type, size_t n) {
  if (type == OptimizerType::Adam) return make_optimizer(test::optimizer_config(type, 0.01, AdamParams{}), n);
  if (type == OptimizerType::SGD) {
    SgdParams s;
    s.momentum = 0.9;
    return make_optimizer(test::optimizer_config(type, 0.01, s), n);
  }
  LambParams l;
  l.weight_decay = 0.01;
  return make_optimizer(test::optimizer_config(type, 0.01, l), n);
}

}  // namespace

TEST_CASE("optimizers: a step over segments equals the step over the concatenation") {
  // 10 elements: tensors [0, 3), [3, 7) in the first segment, [7, 10) in the second (with padding
  // between the segments in memory, which must stay untouched).
  const std::vector<TensorRange> tensors = {{0, 3}, {3, 4}, {7, 3}};
  for (OptimizerType type : {OptimizerType::Adam, OptimizerType::SGD, OptimizerType::Lamb}) {
    CAPTURE(static_cast<int>(type));
    std::vector<float> whole(10), grads(10);
    for (int i = 0; i < 10; ++i) {
      whole[i] = 0.1f * static_cast<float>(i + 1);
      grads[i] = 0.03f * static_cast<float>(i % 4) - 0.05f;
    }
    std::vector<float> spread(13, 42.0f), spread_grads(13, -1.0f);  // [0, 7) · 3 padding · [10, 13)
    std::copy(whole.begin(), whole.begin() + 7, spread.begin());
    std::copy(whole.begin() + 7, whole.end(), spread.begin() + 10);
    std::copy(grads.begin(), grads.begin() + 7, spread_grads.begin());
    std::copy(grads.begin() + 7, grads.end(), spread_grads.begin() + 10);

    auto contiguous = make(type, 10), segmented = make(type, 10);
    const Segment segments[] = {{spread.data(), spread_grads.data(), 7}, {spread.data() + 10, spread_grads.data() + 10, 3}};
    for (int step = 1; step <= 3; ++step) {
      contiguous->step(whole.data(), grads.data(), 10, tensors, 0.01, step);
      segmented->step(segments, tensors, 0.01, step);
    }
    for (int i = 0; i < 7; ++i) CHECK(spread[i] == whole[i]);
    for (int i = 7; i < 10; ++i) CHECK(spread[i] == 42.0f);
    for (int i = 7; i < 10; ++i) CHECK(spread[i + 3] == whole[i]);
    auto a = contiguous->state(), b = segmented->state();
    REQUIRE(a.size() == b.size());
    for (size_t s = 0; s < a.size(); ++s) CHECK(values(a[s]) == values(b[s]));
  }
}

TEST_CASE("optimizers: segments must add up to the size and hold each tensor whole") {
  std::vector<float> p(6, 1.0f), g(6, 0.5f);
  const Segment two[] = {{p.data(), g.data(), 3}, {p.data() + 3, g.data() + 3, 3}};
  CHECK_THROWS_AS(make(OptimizerType::Adam, 5)->step(two, {}, 0.01, 1), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make(OptimizerType::Lamb, 6)->step(two, {{2, 2}}, 0.01, 1),
                       doctest::Contains("not inside one segment"), std::invalid_argument);
}

// ZeRO-Infinity's sub-group steps: an optimizer made for 0 elements, stepping runs of the elements
// with state the caller holds, gives the step of the optimizer that holds it all, bit for bit.
TEST_CASE("optimizers: element-wise steps with the caller's state equal the step over everything") {
  for (OptimizerType type : {OptimizerType::Adam, OptimizerType::SGD}) {
    CAPTURE(static_cast<int>(type));
    std::vector<float> whole(10), grads(10);
    for (int i = 0; i < 10; ++i) {
      whole[i] = 0.1f * static_cast<float>(i + 1);
      grads[i] = 0.03f * static_cast<float>(i % 4) - 0.05f;
    }
    std::vector<float> parts = whole;
    auto reference = make(type, 10), streaming = make(type, 0);
    REQUIRE(streaming->elementwise());
    const size_t buffers = streaming->state().size();
    std::vector<std::vector<float>> held(buffers, std::vector<float>(10, 0.0f));  // the caller's state
    for (int step = 1; step <= 3; ++step) {
      reference->step(whole.data(), grads.data(), 10, {}, 0.01, step);
      for (auto [begin, count] : {std::pair<size_t, size_t>{0, 4}, {4, 4}, {8, 2}}) {  // three sub-groups
        std::vector<StateView> state;
        for (size_t k = 0; k < buffers; ++k)
          state.push_back({streaming->state()[k].name, amp::Storage::F32, held[k].data() + begin, count});
        const Segment part{parts.data() + begin, grads.data() + begin, count};
        streaming->step_with_state(std::span(&part, 1), state, 0.01, step);
      }
    }
    CHECK(parts == whole);
    for (size_t k = 0; k < buffers; ++k) CHECK(held[k] == values(reference->state()[k]));
    std::vector<StateView> wrong = {{"exp_avg", amp::Storage::F32, held[0].data(), 3}};
    const Segment four{parts.data(), grads.data(), 4};
    CHECK_THROWS_AS(streaming->step_with_state(std::span(&four, 1), wrong, 0.01, 4), std::invalid_argument);
  }
  const Segment none{nullptr, nullptr, 0};
  CHECK_FALSE(make(OptimizerType::Lamb, 0)->elementwise());
  CHECK_THROWS_AS(make(OptimizerType::Lamb, 0)->step_with_state(std::span(&none, 1), {}, 0.01, 1), std::logic_error);
}
