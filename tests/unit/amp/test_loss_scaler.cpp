// The fp16 loss scaler against sequences worked out from DeepSpeed's DynamicLossScaler rules
// (reference §3.3 (A)): each list is the scale in effect at each step (before its update).
#include <doctest/doctest.h>

#include <vector>

#include "amp/loss_scaler.h"

using namespace ds::amp;

namespace {

// Runs the overflow pattern; returns the scale each step used.
std::vector<double> run(LossScalerConfig c, const std::vector<bool>& overflows) {
  LossScaler s(c);
  std::vector<double> used;
  for (bool o : overflows) {
    used.push_back(s.scale());
    const ScaleUpdate u = s.update(o);
    CHECK(u.skipped == o);
    CHECK(u.before == used.back());
    CHECK(u.after == s.scale());
  }
  return used;
}

LossScalerConfig config(double init, int64_t window, int64_t hysteresis, double min_scale = 1.0,
                        bool consecutive = false) {
  LossScalerConfig c;
  c.initial_scale = init;
  c.window = window;
  c.hysteresis = hysteresis;
  c.min_scale = min_scale;
  c.consecutive_hysteresis = consecutive;
  return c;
}

}  // namespace

TEST_CASE("loss scaler: clean steps double the scale every window") {
  // DeepSpeed's test: init 2^8, window 2, ten clean steps.
  CHECK(run(config(256, 2, 1), std::vector<bool>(10, false)) ==
        std::vector<double>{256, 256, 512, 512, 1024, 1024, 2048, 2048, 4096, 4096});
  // Default window 1000: the first doubling after the 1000th clean step.
  const auto long_run = run(config(65536, 1000, 2), std::vector<bool>(1001, false));
  CHECK(long_run[999] == 65536);
  CHECK(long_run[1000] == 131072);
}

TEST_CASE("loss scaler: overflows halve the scale, without hysteresis") {
  CHECK(run(config(16, 1000, 1), {true, true, true}) == std::vector<double>{16, 8, 4});
}

TEST_CASE("loss scaler: hysteresis tolerates overflows before halving, refilled on growth") {
  // hysteresis 2: the first overflow uses it, the second halves; clean steps do not refill it
  // (non-consecutive) until the scale grows.
  CHECK(run(config(1024, 3, 2), {true, false, true, true, false, false, false, true, true}) ==
        std::vector<double>{1024, 1024, 1024, 512, 256, 256, 256, 512, 512});
  // After an overflow at iteration k the next doubling is at k + window: overflow at 0 (hysteresis),
  // clean 1, 2, 3 → doubles at iteration 3.
  CHECK(run(config(64, 3, 2), {true, false, false, false, false}) == std::vector<double>{64, 64, 64, 64, 128});
}

TEST_CASE("loss scaler: consecutive hysteresis refills on every clean step") {
  // Overflow, clean, overflow: with refills every overflow is absorbed; without, the second halves.
  CHECK(run(config(1024, 100, 2, 1, true), {true, false, true, false, true}) ==
        std::vector<double>{1024, 1024, 1024, 1024, 1024});
  CHECK(run(config(1024, 100, 2, 1, false), {true, false, true, false, true}) ==
        std::vector<double>{1024, 1024, 1024, 512, 512});
}

TEST_CASE("loss scaler: the minimum scale is a floor, and an overflow there stops training") {
  LossScaler s(config(4, 1000, 1, 2));
  s.update(true);  // 4 -> 2
  CHECK(s.scale() == 2);
  CHECK_THROWS_WITH(s.update(true), doctest::Contains("minimum loss scale 2"));
  LossScaler floor(config(3, 1000, 1, 2));
  floor.update(true);  // 3 -> max(1.5, 2) = 2
  CHECK(floor.scale() == 2);
}

TEST_CASE("loss scaler: a static scale never changes, overflow steps are still skipped") {
  LossScalerConfig c = config(128, 2, 1);
  c.dynamic = false;
  LossScaler s(c);
  for (bool o : {false, false, true, true, true, false, false}) CHECK(s.update(o).skipped == o);
  CHECK(s.scale() == 128);
}

TEST_CASE("loss scaler: state restores exactly") {
  LossScaler a(config(1024, 3, 2)), b(config(1024, 3, 2));
  for (bool o : {true, false, false, true, true}) a.update(o);
  b.restore(a.state());
  for (bool o : {false, false, false, true, true, false}) CHECK(a.update(o).after == b.update(o).after);
}
