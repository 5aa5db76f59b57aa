// Optimizer::hold_state: the state of an optimizer that a device runs (engine/device_step.h) is freed on
// the host while the device holds it, and made again for a checkpoint or a restore.
#include <doctest/doctest.h>

#include <vector>

#include "optim/optimizer.h"
#include "optim_test_util.h"

// The optimizers a device can run free their state while the device holds it, and make it again zeroed
// for the caller to fill (a checkpoint).
TEST_CASE("optimizers: a device's optimizer frees its state and makes it again") {
  const std::vector<ds::OptimizerConfig> configs{
      ds::test::optimizer_config(ds::OptimizerType::Adam, 0.1, ds::AdamParams{}),
      ds::test::optimizer_config(ds::OptimizerType::SGD, 0.1, ds::SgdParams{0.9, 0, 0, false}),
      ds::test::optimizer_config(ds::OptimizerType::Lamb, 0.1, ds::LambParams{})};
  for (const ds::OptimizerConfig& config : configs) {
    auto opt = ds::make_optimizer(config, 5);
    std::vector<float> p(5, 1.0f), g(5, 0.5f);
    opt->step(p.data(), g.data(), 5, {}, 0.1, 1);  // (non-zero state)
    REQUIRE_FALSE(opt->state().empty());
    opt->hold_state(false);
    for (const ds::StateView& v : opt->state()) {
      CHECK(v.data == nullptr);
      CHECK(v.size == 5);
    }
    opt->hold_state(true);
    for (const ds::StateView& v : opt->state()) {
      REQUIRE(v.data != nullptr);
      CHECK(ds::test::values(v) == std::vector<float>(5, 0.0f));
    }
  }
}
