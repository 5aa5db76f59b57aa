// LR schedules at chosen updates k, worked by hand from DeepSpeed's formulas at t = k − 2
// (t = −1 is the value installed at construction, used by update 1).
#include <doctest/doctest.h>

#include <stdexcept>

#include "optim/lr_schedule.h"
#include "optim_test_util.h"

using ds::test::check_close;

namespace {

std::unique_ptr<ds::LrSchedule> warmup(double min, double max, int64_t steps, ds::WarmupType type,
                                       int64_t total = 0) {
  ds::SchedulerConfig c;
  c.type = total ? ds::SchedulerType::WarmupDecayLR : ds::SchedulerType::WarmupLR;
  c.params = ds::WarmupParams{min, max, steps, type, total};
  return ds::make_lr_schedule(c, 123.0);  // base lr unused by these
}

std::unique_ptr<ds::LrSchedule> one_cycle(double first, double second, double decay_lr_rate = 0,
                                          double decay_step_size = 0, double decay_mom_rate = 0) {
  ds::OneCycleParams p;
  p.cycle_min_lr = 0.01;
  p.cycle_max_lr = 0.1;
  p.cycle_first_step_size = first;
  p.cycle_second_step_size = second;
  p.decay_lr_rate = decay_lr_rate;
  p.decay_step_size = decay_step_size;
  p.decay_mom_rate = decay_mom_rate;
  ds::SchedulerConfig c;
  c.type = ds::SchedulerType::OneCycle;
  c.params = p;
  return ds::make_lr_schedule(c, 123.0);
}

}  // namespace

TEST_CASE("lr: no scheduler is constant") {
  auto s = ds::make_lr_schedule(std::nullopt, 0.003);
  CHECK(s->lr(1) == 0.003);
  CHECK(s->lr(1000) == 0.003);
  CHECK_FALSE(s->betas(1));
  CHECK_THROWS_AS(s->lr(0), std::invalid_argument);
}

TEST_CASE("lr: WarmupLR log") {
  // min 0, max 0.01, W 10: lr = 0.01·ln(t+1)/ln(10) for t < 10, then 0.01.
  auto s = warmup(0.0, 0.01, 10, ds::WarmupType::log);
  CHECK(s->lr(1) == 0.0);                      // t = −1: warmup_min_lr
  CHECK(s->lr(2) == 0.0);                      // t = 0: ln 1 = 0
  check_close(s->lr(3), 0.0030102999566);     // t = 1: 0.01·ln 2/ln 10
  check_close(s->lr(6), 0.0069897000434);     // t = 4: 0.01·ln 5/ln 10
  check_close(s->lr(11), 0.01);               // t = 9: ln 10/ln 10 = 1, end of warmup
  check_close(s->lr(12), 0.01);               // t = 10: past warmup
  check_close(s->lr(100000), 0.01);
}

TEST_CASE("lr: WarmupLR linear") {
  // min 0.001, max 0.011, W 10: lr = 0.001 + 0.01·t/10.
  auto s = warmup(0.001, 0.011, 10, ds::WarmupType::linear);
  check_close(s->lr(1), 0.001);
  check_close(s->lr(2), 0.001);   // t = 0
  check_close(s->lr(3), 0.002);   // t = 1
  check_close(s->lr(7), 0.006);   // t = 5, mid-warmup
  check_close(s->lr(11), 0.010);  // t = 9: still 9/10 — linear reaches max one update later than log
  check_close(s->lr(12), 0.011);  // t = 10
  check_close(s->lr(500), 0.011);
  // warmup_num_steps 1 is clamped to 2: t = 0 → 0, t = 1 → 1/2, t = 2 → max.
  auto short_warmup = warmup(0.0, 0.01, 1, ds::WarmupType::linear);
  CHECK(short_warmup->lr(2) == 0.0);
  check_close(short_warmup->lr(3), 0.005);
  check_close(short_warmup->lr(4), 0.01);
}

TEST_CASE("lr: WarmupDecayLR") {
  // min 0, max 0.01, W 10 linear, T 20: after warmup γ = max(0, (20 − t)/(20 − 10)).
  auto s = warmup(0.0, 0.01, 10, ds::WarmupType::linear, 20);
  CHECK(s->lr(1) == 0.0);
  check_close(s->lr(7), 0.005);   // t = 5, mid-warmup
  check_close(s->lr(11), 0.009);  // t = 9
  check_close(s->lr(12), 0.01);   // t = 10: γ = 10/10, end of warmup
  check_close(s->lr(17), 0.005);  // t = 15: 5/10, mid-decay
  CHECK(s->lr(22) == 0.0);        // t = 20: end
  CHECK(s->lr(30) == 0.0);        // t = 28: max(0, −8/10), beyond
  // With min 0.001, max 0.011: decays towards min.
  auto m = warmup(0.001, 0.011, 10, ds::WarmupType::linear, 20);
  check_close(m->lr(17), 0.006);
  check_close(m->lr(22), 0.001);
}

TEST_CASE("lr: WarmupCosineLR") {
  // base 0.1, T 20, W 10 linear, warmup_min_ratio 0.1, cos_min_ratio 0.01:
  //   t < 10: ratio = 0.1 + 0.9·t/10;  t >= 10: ratio = 0.01 + 0.99·(1 + cos(π·(t − 9)/10))/2.
  ds::SchedulerConfig c;
  c.type = ds::SchedulerType::WarmupCosineLR;
  c.params = ds::WarmupCosineParams{20, 0.1, 10, 0.01, ds::WarmupType::linear};
  auto s = ds::make_lr_schedule(c, 0.1);
  CHECK(s->lr(1) == 0.0);               // t = −1: DeepSpeed installs 0
  check_close(s->lr(2), 0.01);          // t = 0: ratio 0.1
  check_close(s->lr(7), 0.055);         // t = 5: 0.1 + 0.45
  check_close(s->lr(11), 0.091);        // t = 9: 0.1 + 0.81, end of warmup
  check_close(s->lr(12), 0.0975772976); // t = 10: cos(π/10) = 0.95105652 → 0.01 + 0.99·0.97552826
  check_close(s->lr(16), 0.0505);       // t = 14: cos(π/2) = 0 → 0.01 + 0.495, mid-decay
  check_close(s->lr(21), 0.001);        // t = 19: cos(π) = −1 → cos_min_ratio, end
  check_close(s->lr(26), 0.0505);       // t = 24: cos(3π/2) = 0 — not clamped, rises again
  // log warmup reaches the base lr at t = W − 1 (DeepSpeed's test: step_lrs[W−1] == lr).
  c.params = ds::WarmupCosineParams{20, 0.0, 10, 0.0001, ds::WarmupType::log};
  check_close(ds::make_lr_schedule(c, 0.1)->lr(11), 0.1);
}

TEST_CASE("lr: OneCycle symmetric cycle") {
  // min 0.01, max 0.1, 10 + 10 steps, momentum 0.8..0.9. b = t + 1, x = b/20 − floor(b/20),
  // sf = x/0.5 up to the peak, (x − 1)/(0.5 − 1) after; lr = 0.01 + 0.09·sf, β1 = 0.9 − 0.1·sf.
  auto s = one_cycle(10, 10);
  check_close(s->lr(1), 0.01);  // t = −1: b = 0, sf = 0
  CHECK(s->betas(1)->beta1 == 0.8);  // construction installs cycle_min_mom
  CHECK(s->betas(1)->beta2 == 0.99);
  check_close(s->lr(2), 0.019);  // t = 0: x = 0.05, sf = 0.1
  check_close(s->betas(2)->beta1, 0.89);
  check_close(s->lr(6), 0.055);  // t = 4: x = 0.25, sf = 0.5
  check_close(s->betas(6)->beta1, 0.85);
  check_close(s->lr(11), 0.1);   // t = 9: x = 0.5, sf = 1, the peak (DeepSpeed: [first_step_size] == max)
  check_close(s->betas(11)->beta1, 0.8);
  check_close(s->lr(16), 0.055);  // t = 14: x = 0.75, sf = (0.75 − 1)/(0.5 − 1) = 0.5
  check_close(s->lr(21), 0.01);   // t = 19: b = 20, x = 0, end of the cycle
  check_close(s->betas(21)->beta1, 0.9);
  check_close(s->lr(22), 0.01);   // t = 20: past the cycle, no decay configured
  check_close(s->betas(22)->beta1, 0.9);
  CHECK(s->betas(22)->beta2 == 0.99);
}

TEST_CASE("lr: OneCycle asymmetric and decay") {
  // 4 + 6 steps: total 10, ratio 0.4.
  auto s = one_cycle(4, 6);
  check_close(s->lr(4), 0.0775);  // t = 2: x = 0.3, sf = 0.75
  check_close(s->lr(5), 0.1);     // t = 3: x = 0.4, peak
  check_close(s->lr(8), 0.055);   // t = 6: x = 0.7, sf = (0.7 − 1)/(0.4 − 1) = 0.5
  // Decay after 10 + 10: rate 0.5 every 5 steps, momentum rate 0.1:
  //   t = 20: interval (20 − 20 + 1)/5 = 0.2 → lr = 0.01/(1 + 0.1) = 0.0090909, β1 = 0.9·1.02 = 0.918
  //   t = 29: interval 10/5 = 2 → lr = 0.01/2 = 0.005, β1 = 0.9·1.2 = 1.08 (DeepSpeed's formula, unclamped)
  auto d = one_cycle(10, 10, 0.5, 5, 0.1);
  check_close(d->lr(21), 0.01);  // t = 19: still in the cycle
  check_close(d->lr(22), 0.01 / 1.1);
  check_close(d->betas(22)->beta1, 0.918);
  check_close(d->lr(31), 0.005);
  check_close(d->betas(31)->beta1, 1.08);
}

TEST_CASE("lr: OneCycle without momentum cycling") {
  ds::OneCycleParams p;
  p.cycle_min_lr = 0.01;
  p.cycle_max_lr = 0.1;
  p.cycle_momentum = false;
  ds::SchedulerConfig c;
  c.type = ds::SchedulerType::OneCycle;
  c.params = p;
  auto s = ds::make_lr_schedule(c, 1.0);
  CHECK_FALSE(s->betas(1));
  CHECK_FALSE(s->betas(5000));
  check_close(s->lr(2001), 0.1);  // default first step size 2000: the peak at t = 1999
}
