// Lamb against FusedLamb's rule worked by hand (reference §4.3), β = (0.9, 0.999), eps = 1e-8:
//   m = 0.1·g, v = 0.001·g² (first step);  u = m/(sqrt(v) + eps) + wd·p;
//   r = clamp(‖p‖/‖u‖, min_coeff 0.01, max_coeff 10) (1 if a norm is 0);
//   p −= step_size·r·u,  step_size = lr·sqrt(1 − β2^t)/(1 − β1^t).
// With g = (0.3, −0.4) on the first step: sqrt(v) = (0.00948683, 0.01264911), so
//   u = (0.03/0.00948684, −0.04/0.01264912) = (3.16227433, −3.16227516)   (≈ ±sqrt(10))
//   ‖u‖ = 4.47213479;  step_size = 0.01·sqrt(0.001)/0.1 = 0.00316227766.
// As in FusedLamb the arithmetic is fp32 with β as floats (1 − 0.999f = 0.00099998713); step_size
// uses the same fp32 β, so the factors cancel in p, and only v shows them (0.99998713×).
#include <doctest/doctest.h>

#include <barrier>
#include <mutex>
#include <thread>

#include "optim/optimizer.h"
#include "optim_test_util.h"

using ds::test::check_close;
using ds::test::values;

namespace {

std::unique_ptr<ds::Optimizer> lamb(size_t n, double weight_decay = 0.0, bool bias_correction = true,
                                    ds::NormReducer reduce = {}) {
  ds::LambParams l;
  l.weight_decay = weight_decay;
  l.bias_correction = bias_correction;
  return ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::Lamb, 0.01, l), n, std::move(reduce));
}

}  // namespace

TEST_CASE("lamb: first step with trust ratio") {
  // p = (3, 4): ‖p‖ = 5, r = 5/4.47213479 = 1.11803502;
  //   Δ = 0.00316227766·1.11803502·(3.16227433, −3.16227516) = (0.01118034, −0.01118034)
  //   p = (2.98881966, 4.01118034)
  auto opt = lamb(2);
  std::vector<float> p = {3.0f, 4.0f}, g = {0.3f, -0.4f};
  opt->step(p.data(), g.data(), 2, {}, 0.01, 1);
  check_close(p[0], 2.988819661586);
  check_close(p[1], 4.011180341361);
  check_close(values(opt->state()[0])[1], -0.04);
  check_close(values(opt->state()[1])[1], 0.00016 * 0.99998712540);
}

TEST_CASE("lamb: trust ratio clamped to min_coeff") {
  // p = (0.003, 0.004): ‖p‖ = 0.005, r = 0.005/4.472 = 0.00112 → clamped to 0.01;
  //   Δ = 0.00316227766·0.01·(3.16227433, −3.16227516) = (1.0e-4, −1.0e-4);  p = (0.0029, 0.0041)
  auto opt = lamb(2);
  std::vector<float> p = {0.003f, 0.004f}, g = {0.3f, -0.4f};
  opt->step(p.data(), g.data(), 2, {}, 0.01, 1);
  check_close(p[0], 0.0029000001054);
  check_close(p[1], 0.0040999999209);
}

TEST_CASE("lamb: zero weights give ratio 1") {
  // p = 0: ‖p‖ = 0 → r = 1;  u = (3.16227433, −3.16227516) + 0.1·0;  p = −0.00316227766·u = (−0.01, 0.01)
  auto opt = lamb(2, 0.1);
  std::vector<float> p = {0.0f, 0.0f}, g = {0.3f, -0.4f};
  opt->step(p.data(), g.data(), 2, {}, 0.01, 1);
  check_close(p[0], -0.009999989459);
  check_close(p[1], 0.009999992094);
}

TEST_CASE("lamb: weight decay and no bias correction") {
  // wd 0.1, p = (3, 4): u = (3.16227433 + 0.3, −3.16227516 + 0.4) = (3.46227433, −2.76227516),
  //   ‖u‖ = 4.42924... → r = 5/4.42924 = 1.12888081;  p = (3, 4) − 0.00316227766·1.12888081·u
  //   = (2.98764025, 4.00986087)
  auto wd = lamb(2, 0.1);
  std::vector<float> p = {3.0f, 4.0f}, g = {0.3f, -0.4f};
  wd->step(p.data(), g.data(), 2, {}, 0.01, 1);
  check_close(p[0], 2.987640253447);
  check_close(p[1], 4.009860865335);
  // No bias correction: step_size = lr = 0.01; p = (1, −1): ‖p‖ = 1.41421356, r = 1.41421356/4.47213479
  //   = 0.31622806;  Δ = 0.01·0.31622806·u = (0.00999999868, −0.0100000013)  → p = (0.99000000, −0.98999999)
  auto plain = lamb(2, 0.0, false);
  p = {1.0f, -1.0f};
  plain->step(p.data(), g.data(), 2, {}, 0.01, 1);
  check_close(p[0], 0.9900000013176);
  check_close(p[1], -0.9899999986824);
}

TEST_CASE("lamb: two steps") {
  // Step 1 as in "first step": p = (2.98881966, 4.01118034), m = (0.03, −0.04), v = (9e-5, 1.6e-4).
  // Step 2, g = (0.3, 0.4): m = (0.027 + 0.03, −0.036 + 0.04) = (0.057, 0.004),
  //   v = (8.991e-5 + 9e-5, 1.5984e-4 + 1.6e-4) = (1.7991e-4, 3.1984e-4),
  //   u = (0.057/0.01341305, 0.004/0.01788407) = (4.24958852, 0.22366260), ‖u‖ = 4.25547...,
  //   ‖p‖ = 5.00224...  → r = 1.17548948;  step_size = 0.01·sqrt(1 − 0.998001)/(1 − 0.81) = 0.00235316725
  //   p = (2.98881966 − 0.01175490, 4.01118034 − 0.00061868) = (2.97706478, 4.01056166)
  auto opt = lamb(2);
  std::vector<float> p = {3.0f, 4.0f}, g1 = {0.3f, -0.4f}, g2 = {0.3f, 0.4f};
  opt->step(p.data(), g1.data(), 2, {}, 0.01, 1);
  opt->step(p.data(), g2.data(), 2, {}, 0.01, 2);
  check_close(p[0], 2.977064775598);
  check_close(p[1], 4.010561663035);
}

TEST_CASE("lamb: one ratio per tensor and padding untouched") {
  // Tensor A = elements [0, 2) as in "first step"; element 2 is padding; tensor B = [3, 5) as in
  // "trust ratio clamped": each tensor gets its own ratio.
  auto opt = lamb(5);
  std::vector<float> p = {3.0f, 4.0f, 7.0f, 0.003f, 0.004f}, g = {0.3f, -0.4f, 1.0f, 0.3f, -0.4f};
  opt->step(p.data(), g.data(), 5, {{0, 2}, {3, 2}}, 0.01, 1);
  check_close(p[0], 2.988819661586);
  check_close(p[1], 4.011180341361);
  CHECK(p[2] == 7.0f);
  CHECK(values(opt->state()[0])[2] == 0.0f);
  check_close(p[3], 0.0029000001054);
  check_close(p[4], 0.0040999999209);
  CHECK_THROWS_AS(opt->step(p.data(), g.data(), 5, {{4, 2}}, 0.01, 2), std::invalid_argument);
}

TEST_CASE("lamb: a tensor split across two ranks matches the whole tensor") {
  // Rank 0 owns element 0 of the tensor (3, 4), rank 1 element 1; the reducer sums their partial
  // [Σp², Σu²] through a shared buffer, as an all-reduce would. Result: "first step" numbers.
  std::vector<double> shared(2, 0.0);
  std::barrier sync(2);
  std::mutex mutex;
  auto reducer = [&](std::vector<double>& sums) {
    {
      std::lock_guard lock(mutex);
      for (size_t i = 0; i < sums.size(); ++i) shared[i] += sums[i];
    }
    sync.arrive_and_wait();
    sums = shared;
    sync.arrive_and_wait();
  };
  std::vector<float> p = {3.0f, 4.0f}, g = {0.3f, -0.4f};
  auto rank = [&](size_t r) {
    auto opt = lamb(1, 0.0, true, reducer);
    opt->step(&p[r], &g[r], 1, {{0, 1}}, 0.01, 1);
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  check_close(p[0], 2.988819661586);
  check_close(p[1], 4.011180341361);
}
