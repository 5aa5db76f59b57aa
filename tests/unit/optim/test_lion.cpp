// Lion against its rule worked by hand (DeepSpeed's FusedLion; lr 0.1, β 0.9/0.99, weight decay 0.1, p0 = 1):
//   c = β1·m + (1−β1)·g;  p = p·(1 − lr·wd) − lr·sign(c);  m = β2·m + (1−β2)·g
#include <doctest/doctest.h>

#include <stdexcept>

#include "optim/optimizer.h"
#include "optim_test_util.h"

using ds::test::check_close;

namespace {

std::unique_ptr<ds::Optimizer> lion(size_t n, ds::amp::Storage state = ds::amp::Storage::F32) {
  return ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::Lion, 0.1, ds::LionParams{0.9, 0.99, 0.1}),
                            n, {}, nullptr, state);
}

}  // namespace

TEST_CASE("lion: three steps as worked by hand, the last against the gradient's new sign") {
  auto opt = lion(1);
  std::vector<float> p = {1.0f}, g = {0.5f};
  // c = 0.05 > 0: p = 0.99 − 0.1 = 0.89; m = 0.01·0.5 = 0.005
  opt->step(p.data(), g.data(), 1, {}, 0.1, 1);
  check_close(p[0], 0.89);
  check_close(ds::test::values(opt->state()[0])[0], 0.005);
  // c = 0.0045 + 0.05 > 0: p = 0.89·0.99 − 0.1 = 0.7811; m = 0.00495 + 0.005 = 0.00995
  opt->step(p.data(), g.data(), 1, {}, 0.1, 2);
  check_close(p[0], 0.7811);
  check_close(ds::test::values(opt->state()[0])[0], 0.00995);
  // g = −0.5: c = 0.008955 − 0.05 < 0: p = 0.7811·0.99 + 0.1 = 0.873289; m = 0.0098505 − 0.005 = 0.0048505
  g[0] = -0.5f;
  opt->step(p.data(), g.data(), 1, {}, 0.1, 3);
  check_close(p[0], 0.873289);
  check_close(ds::test::values(opt->state()[0])[0], 0.0048505);
  CHECK(opt->state()[0].name == "exp_avg");  // DeepSpeed's name, in checkpoints
}

TEST_CASE("lion: element-wise (ZeRO-Infinity's sub-groups), bf16 state, betas set by OneCycle, on the device") {
  auto opt = lion(0);
  CHECK(opt->elementwise());
  std::vector<float> p = {1.0f, 1.0f}, g = {0.5f, -0.5f}, m = {0.0f, 0.0f};
  const ds::Segment s{p.data(), g.data(), 2};
  const ds::StateView state{"exp_avg", ds::amp::Storage::F32, m.data(), 2};
  opt->step_with_state(std::span<const ds::Segment>(&s, 1), std::span<const ds::StateView>(&state, 1), 0.1, 1);
  check_close(p[0], 0.89);
  check_close(p[1], 1.09);
  check_close(m[1], -0.005);

  auto half = lion(1, ds::amp::Storage::BF16);
  CHECK(half->state()[0].storage == ds::amp::Storage::BF16);
  CHECK(!half->device_update(0.1, 1));  // the device's kernel keeps fp32 state

  auto cycled = lion(1);
  cycled->set_betas(0.5, 0.5);  // c = 0.5·m + 0.5·g; m = 0.5·m + 0.5·g
  std::vector<float> q = {1.0f}, h = {0.5f};
  cycled->step(q.data(), h.data(), 1, {}, 0.1, 1);
  check_close(ds::test::values(cycled->state()[0])[0], 0.25);
  const auto u = cycled->device_update(0.1, 2);
  REQUIRE(u);
  CHECK(u->kind == ds::DeviceUpdate::Kind::lion);
  CHECK(u->lion.lr == 0.1f);
  CHECK(u->lion.after_decay == 1.0f - 0.1f * 0.1f);
  CHECK(u->lion.beta1 == 0.5f);
  CHECK(u->lion.one_minus_beta2 == 0.5f);
}
