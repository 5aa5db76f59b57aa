// SGD against torch.optim.SGD's rule worked by hand (reference §4.4), lr 0.1, p0 = 1, g = 0.5:
//   d = g + wd·p;  momentum μ: buf = d (first step) else μ·buf + (1 − dampening)·d;
//   d = d + μ·buf (nesterov) or buf;  p −= lr·d.
#include <doctest/doctest.h>

#include <stdexcept>

#include "optim/optimizer.h"
#include "optim_test_util.h"

using ds::test::check_close;

namespace {

// Two steps of SGD on p = 1 with g = 0.5; returns p after each.
std::pair<double, double> two_steps(double momentum, double dampening, double weight_decay, bool nesterov) {
  ds::SgdParams s{momentum, dampening, weight_decay, nesterov};
  auto opt = ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::SGD, 0.1, s), 1);
  std::vector<float> p = {1.0f}, g = {0.5f};
  opt->step(p.data(), g.data(), 1, {}, 0.1, 1);
  double first = p[0];
  opt->step(p.data(), g.data(), 1, {}, 0.1, 2);
  return {first, p[0]};
}

}  // namespace

TEST_CASE("sgd: plain and with weight decay") {
  // plain: p = 1 − 0.05 = 0.95, then 0.95 − 0.05 = 0.9
  auto [a1, a2] = two_steps(0, 0, 0, false);
  check_close(a1, 0.95);
  check_close(a2, 0.9);
  // wd 0.1: d = 0.5 + 0.1 = 0.6, p = 0.94;  d = 0.5 + 0.094 = 0.594, p = 0.94 − 0.0594 = 0.8806
  auto [b1, b2] = two_steps(0, 0, 0.1, false);
  check_close(b1, 0.94);
  check_close(b2, 0.8806);
}

TEST_CASE("sgd: momentum") {
  // μ 0.9: buf = 0.5, p = 0.95;  buf = 0.45 + 0.5 = 0.95, p = 0.95 − 0.095 = 0.855
  auto [a1, a2] = two_steps(0.9, 0, 0, false);
  check_close(a1, 0.95);
  check_close(a2, 0.855);
  // dampening 0.5 (not applied on the first step): buf = 0.5, p = 0.95;
  //   buf = 0.45 + 0.5·0.5 = 0.7, p = 0.95 − 0.07 = 0.88
  auto [b1, b2] = two_steps(0.9, 0.5, 0, false);
  check_close(b1, 0.95);
  check_close(b2, 0.88);
  // wd 0.1 + μ 0.9: d = 0.6, buf = 0.6, p = 0.94;  d = 0.5 + 0.094 = 0.594, buf = 0.54 + 0.594 = 1.134,
  //   p = 0.94 − 0.1134 = 0.8266
  auto [c1, c2] = two_steps(0.9, 0, 0.1, false);
  check_close(c1, 0.94);
  check_close(c2, 0.8266);
}

TEST_CASE("sgd: nesterov") {
  // μ 0.9: buf = 0.5, d = 0.5 + 0.45 = 0.95, p = 0.905;
  //        buf = 0.45 + 0.5 = 0.95, d = 0.5 + 0.855 = 1.355, p = 0.905 − 0.1355 = 0.7695
  auto [a1, a2] = two_steps(0.9, 0, 0, true);
  check_close(a1, 0.905);
  check_close(a2, 0.7695);
}

TEST_CASE("sgd: state and betas") {
  ds::SgdParams plain;
  auto opt = ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::SGD, 0.1, plain), 4);
  CHECK(opt->state().empty());
  CHECK_THROWS_AS(opt->set_betas(0.9, 0.99), std::logic_error);
  ds::SgdParams momentum{0.9, 0, 0, false};
  auto with_momentum = ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::SGD, 0.1, momentum), 4);
  REQUIRE(with_momentum->state().size() == 1);
  CHECK(with_momentum->state()[0].name == "momentum_buffer");
  CHECK(with_momentum->state()[0].size == 4);
}

TEST_CASE("sgd: refuses a segment asking it to scale gradients or copy parameters (only Adam fuses)") {
  auto opt = ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::SGD, 0.1, ds::SgdParams{}), 1);
  CHECK_FALSE(opt->fuses_mixed_precision());
  std::vector<float> p = {1.0f}, g = {0.5f};
  ds::Segment scaled{p.data(), g.data(), 1};
  scaled.grad_scale = 0.5;
  CHECK_THROWS_WITH_AS(opt->step(std::span<const ds::Segment>(&scaled, 1), {}, 0.1, 1),
                       "SGD: does not scale gradients or copy parameters as it steps", std::invalid_argument);
  CHECK(p[0] == 1.0f);
  auto adam = ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::AdamW, 0.1, ds::AdamParams{}), 1);
  CHECK(adam->fuses_mixed_precision());
}
