// Adagrad against torch.optim.Adagrad's rule worked by hand (lr 0.1, p0 = 1, g = 0.5):
//   d = g + wd·p;  s = s + d² (s0 = initial_accumulator_value);  p = p − clr·d/(√s + eps),
//   clr = lr / (1 + (step − 1)·lr_decay)
#include <doctest/doctest.h>

#include <cmath>

#include "optim/optimizer.h"
#include "optim_test_util.h"

using ds::test::check_close;

namespace {

std::unique_ptr<ds::Optimizer> adagrad(const ds::AdagradParams& params, size_t n,
                                       ds::amp::Storage state = ds::amp::Storage::F32) {
  return ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::Adagrad, 0.1, params), n, {}, nullptr, state);
}

}  // namespace

TEST_CASE("adagrad: two steps as worked by hand, plain and with every option") {
  auto plain = adagrad({}, 1);
  std::vector<float> p = {1.0f}, g = {0.5f};
  plain->step(p.data(), g.data(), 1, {}, 0.1, 1);  // s = 0.25, p = 1 − 0.1·0.5/0.5 = 0.9
  check_close(p[0], 0.9);
  plain->step(p.data(), g.data(), 1, {}, 0.1, 2);  // s = 0.5, p = 0.9 − 0.1·0.5/√0.5 = 0.82928932
  check_close(p[0], 0.9 - 0.05 / std::sqrt(0.5));
  check_close(ds::test::values(plain->state()[0])[0], 0.5);
  CHECK(plain->state()[0].name == "sum");  // torch's name, in checkpoints

  // wd 0.1, lr_decay 0.5, initial 0.75, eps 0.25:
  //   step 1: d = 0.6, s = 0.75 + 0.36 = 1.11, p = 1 − 0.1·0.6/(√1.11 + 0.25)
  //   step 2: clr = 0.1/1.5, d = 0.5 + 0.1·p1, s = 1.11 + d², p = p1 − clr·d/(√s + 0.25)
  auto full = adagrad({0.5, 0.1, 0.75, 0.25}, 1);
  std::vector<float> q = {1.0f};
  full->step(q.data(), g.data(), 1, {}, 0.1, 1);
  const double p1 = 1.0 - 0.1 * 0.6 / (std::sqrt(1.11) + 0.25);
  check_close(q[0], p1);
  full->step(q.data(), g.data(), 1, {}, 0.1, 2);
  const double d2 = 0.5 + 0.1 * p1, s2 = 1.11 + d2 * d2;
  check_close(q[0], p1 - 0.1 / 1.5 * d2 / (std::sqrt(s2) + 0.25));
  check_close(ds::test::values(full->state()[0])[0], s2);
}

TEST_CASE("adagrad: element-wise with the caller's state, which the first step starts at the initial value") {
  auto opt = adagrad({0.0, 0.0, 0.75, 1e-10}, 0);
  CHECK(opt->elementwise());
  std::vector<float> p = {1.0f}, g = {0.5f}, s = {123.0f};  // (whatever the buffer holds before step 1)
  const ds::Segment seg{p.data(), g.data(), 1};
  const ds::StateView state{"sum", ds::amp::Storage::F32, s.data(), 1};
  opt->step_with_state(std::span<const ds::Segment>(&seg, 1), std::span<const ds::StateView>(&state, 1), 0.1, 1);
  check_close(s[0], 1.0);  // 0.75 + 0.25
  check_close(p[0], 0.95);  // 1 − 0.1·0.5/1
}

TEST_CASE("adagrad: the device's update carries the step's learning rate and the first step's flag; bf16 state none") {
  auto opt = adagrad({0.5, 0.01, 0.75, 1e-8}, 1);
  const auto first = opt->device_update(0.1, 1), third = opt->device_update(0.1, 3);
  REQUIRE(first);
  REQUIRE(third);
  CHECK(first->kind == ds::DeviceUpdate::Kind::adagrad);
  CHECK(first->adagrad.first);
  CHECK(!third->adagrad.first);
  CHECK(first->adagrad.clr == 0.1f);
  CHECK(third->adagrad.clr == static_cast<float>(0.1 / 2.0));  // lr / (1 + 2·0.5)
  CHECK(third->adagrad.weight_decay == 0.01f);
  CHECK(third->adagrad.initial == 0.75f);
  CHECK(third->adagrad.eps == 1e-8f);
  CHECK(!adagrad({}, 1, ds::amp::Storage::BF16)->device_update(0.1, 1));  // the device's kernel keeps fp32 state
}
