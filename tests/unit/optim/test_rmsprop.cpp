// RMSprop against torch.optim.RMSprop's rule worked by hand (lr 0.1, p0 = 1, g = 0.5):
//   d = g + wd·p;  s = α·s + (1−α)·d²;  centered: a = a + (1−α)·(d − a), v = √(s − a²) + eps, else v = √s + eps;
//   momentum μ: b = μ·b + d/v, p = p − lr·b;  else p = p − lr·d/v  (s, a, b start at 0)
#include <doctest/doctest.h>

#include <cmath>

#include "optim/optimizer.h"
#include "optim_test_util.h"

using ds::test::check_close;

namespace {

std::unique_ptr<ds::Optimizer> rmsprop(const ds::RmspropParams& params, size_t n,
                                       ds::amp::Storage state = ds::amp::Storage::F32) {
  return ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::RMSprop, 0.1, params), n, {}, nullptr, state);
}

}  // namespace

TEST_CASE("rmsprop: two steps as worked by hand, plain and with every option") {
  auto plain = rmsprop({}, 1);
  std::vector<float> p = {1.0f}, g = {0.5f};
  plain->step(p.data(), g.data(), 1, {}, 0.1, 1);  // s = 0.01·0.25, v = 0.05 + 1e-8, p = 1 − 0.1·0.5/v
  const double p1 = 1.0 - 0.05 / (0.05 + 1e-8);
  CHECK(std::abs(p[0] - p1) < 1e-7);  // (about 2e-7: p1 is a difference of nearly equal numbers)
  plain->step(p.data(), g.data(), 1, {}, 0.1, 2);  // s = 0.99·0.0025 + 0.0025
  check_close(p[0], p1 - 0.05 / (std::sqrt(0.004975) + 1e-8), 1e-5);
  check_close(ds::test::values(plain->state()[0])[0], 0.004975);
  REQUIRE(plain->state().size() == 1);
  CHECK(plain->state()[0].name == "square_avg");  // torch's name, in checkpoints

  // α 0.9, eps 0.01, wd 0.1, momentum 0.5, centered; step 1 then step 2 with g = −0.25:
  ds::RmspropParams every;
  every.alpha = 0.9;
  every.eps = 0.01;
  every.weight_decay = 0.1;
  every.momentum = 0.5;
  every.centered = true;
  auto full = rmsprop(every, 1);
  REQUIRE(full->state().size() == 3);
  CHECK(full->state()[1].name == "momentum_buffer");  // torch's order: square_avg, momentum_buffer, grad_avg
  CHECK(full->state()[2].name == "grad_avg");
  std::vector<float> q = {1.0f}, g2 = {-0.25f};
  full->step(q.data(), g.data(), 1, {}, 0.1, 1);
  double d = 0.5 + 0.1 * 1.0, s = 0.1 * d * d, a = 0.1 * d, v = std::sqrt(s - a * a) + 0.01, b = d / v;
  const double q1 = 1.0 - 0.1 * b;
  check_close(q[0], q1);
  full->step(q.data(), g2.data(), 1, {}, 0.1, 2);
  d = -0.25 + 0.1 * q1;
  s = 0.9 * s + 0.1 * d * d;
  a = a + 0.1 * (d - a);
  v = std::sqrt(s - a * a) + 0.01;
  b = 0.5 * b + d / v;
  check_close(q[0], q1 - 0.1 * b, 1e-5);
  check_close(ds::test::values(full->state()[0])[0], s);
  check_close(ds::test::values(full->state()[1])[0], b, 1e-5);
  check_close(ds::test::values(full->state()[2])[0], a);
}

TEST_CASE("rmsprop: element-wise with the caller's state, which the first step starts at zero") {
  ds::RmspropParams with_momentum;
  with_momentum.momentum = 0.9;
  auto opt = rmsprop(with_momentum, 0);
  CHECK(opt->elementwise());
  std::vector<float> p = {1.0f}, g = {0.5f}, s = {123.0f}, b = {-7.0f};  // (whatever the buffers hold before step 1)
  const ds::Segment seg{p.data(), g.data(), 1};
  const ds::StateView state[] = {{"square_avg", ds::amp::Storage::F32, s.data(), 1},
                                 {"momentum_buffer", ds::amp::Storage::F32, b.data(), 1}};
  opt->step_with_state(std::span<const ds::Segment>(&seg, 1), state, 0.05, 1);
  check_close(s[0], 0.0025);
  const double v = 0.05 + 1e-8;
  check_close(b[0], 0.5 / v);
  check_close(p[0], 1.0 - 0.05 * 0.5 / v);
}

TEST_CASE("rmsprop: the device steps plain RMSprop with fp32 state; momentum, centered or bf16 state stay on the host") {
  auto plain = rmsprop({0.9, 1e-6, 0.01, 0.0, false}, 1);
  const auto first = plain->device_update(0.1, 1), third = plain->device_update(0.05, 3);
  REQUIRE(first);
  REQUIRE(third);
  CHECK(first->kind == ds::DeviceUpdate::Kind::rmsprop);
  CHECK(first->rmsprop.first);
  CHECK(!third->rmsprop.first);
  CHECK(third->rmsprop.lr == 0.05f);
  CHECK(third->rmsprop.alpha == 0.9f);
  CHECK(third->rmsprop.one_minus_alpha == static_cast<float>(1.0 - 0.9));
  CHECK(third->rmsprop.eps == 1e-6f);
  CHECK(third->rmsprop.weight_decay == 0.01f);
  CHECK(!rmsprop({0.9, 1e-6, 0.0, 0.5, false}, 1)->device_update(0.1, 1));
  CHECK(!rmsprop({0.9, 1e-6, 0.0, 0.0, true}, 1)->device_update(0.1, 1));
  CHECK(!rmsprop({}, 1, ds::amp::Storage::BF16)->device_update(0.1, 1));
}
