// Adam / AdamW against numbers worked out by hand from FusedAdam's rule (reference §4.2):
//   L2: g += wd·p;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//   u = (m/bc1) / (sqrt(v/bc2) + eps);  AdamW: u += wd·p;  p −= lr·u;  bc = 1 − β^t.
// Defaults throughout: β = (0.9, 0.999), eps = 1e-8. Like DeepSpeed's kernels the loop runs in fp32
// with β as floats: 1 − 0.9f = 0.10000002384 and 1 − 0.999f = 0.00099998713, so m and v carry
// those factors (v is 0.99998713× the decimal value), while the bias corrections use the same fp32 β
// and cancel them: m̂, v̂ and p match the decimal arithmetic below to ~1e-7.
#include <doctest/doctest.h>

#include <stdexcept>

#include "optim/optimizer.h"
#include "optim_test_util.h"

using ds::test::check_close;
using ds::test::values;

namespace {

std::unique_ptr<ds::Optimizer> adam(bool adam_w_mode, double weight_decay, bool bias_correction = true,
                                    size_t n = 3) {
  ds::AdamParams p;
  p.adam_w_mode = adam_w_mode;
  p.weight_decay = weight_decay;
  p.bias_correction = bias_correction;
  return ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::Adam, 1e-3, p), n);
}

}  // namespace

TEST_CASE("adam: first step in AdamW mode") {
  // lr 1e-3, wd 0.01, t = 1: bc1 = 0.1, bc2 = 0.001.
  // p=1,  g=0.5:   m = 0.05,   v = 0.00025;   m/bc1 = 0.5,   v/bc2 = 0.25,   sqrt = 0.5
  //                u = 0.5/(0.5+1e-8) + 0.01·1 = 0.99999998 + 0.01 = 1.00999998
  //                p = 1 − 1e-3·1.00999998 = 0.99899000002   (the reference's worked example)
  // p=−2, g=−0.25: m = −0.025, v = 6.25e-5;   m/bc1 = −0.25, sqrt(v/bc2) = 0.25
  //                u = −0.99999996 + 0.01·(−2) = −1.01999996;  p = −2 + 0.00101999996 = −1.99898000004
  // p=0.5, g=0:    m = v = 0, u = 0/(0+1e-8) + 0.01·0.5 = 0.005;  p = 0.5 − 5e-6 = 0.499995 (decay alone)
  auto opt = adam(true, 0.01);
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.5f, -0.25f, 0.0f};
  opt->step(p.data(), g.data(), 3, {}, 1e-3, 1);
  check_close(p[0], 0.99899000002);
  check_close(p[1], -1.99898000004);
  check_close(p[2], 0.499995);
  auto state = opt->state();
  REQUIRE(state.size() == 2);
  CHECK(state[0].name == "exp_avg");
  CHECK(state[1].name == "exp_avg_sq");
  check_close(values(state[0])[0], 0.05);                     // 0.10000002384·0.5
  check_close(values(state[1])[0], 0.00025 * 0.99998712540);  // 0.00099998713·0.25
  check_close(values(state[0])[1], -0.025);
  check_close(values(state[1])[1], 6.25e-5 * 0.99998712540);
}

TEST_CASE("adam: first step in L2 mode") {
  // adam_w_mode false, wd 0.01: the decay goes into g before the moments.
  // p=1,  g=0.5:   g' = 0.5 + 0.01 = 0.51;  m = 0.051, v = 0.0002601;  m/bc1 = 0.51, sqrt(v/bc2) = 0.51
  //                u = 0.51/(0.51+1e-8) = 0.9999999804;  p = 1 − 1e-3·u = 0.9990000000196
  // p=−2, g=−0.25: g' = −0.25 − 0.02 = −0.27;  u = −0.27/(0.27+1e-8) = −0.999999963;  p = −1.999000000037
  // p=0.5, g=0:    g' = 0.005;  m = 0.0005, v = 2.5e-8;  m/bc1 = 0.005, sqrt(v/bc2) = 0.005
  //                u = 0.005/(0.005+1e-8) = 0.999998;  p = 0.5 − 0.000999998 = 0.499000002
  auto opt = adam(false, 0.01);
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.5f, -0.25f, 0.0f};
  opt->step(p.data(), g.data(), 3, {}, 1e-3, 1);
  check_close(p[0], 0.9990000000196);
  check_close(p[1], -1.999000000037);
  check_close(p[2], 0.499000002);
  check_close(values(opt->state()[0])[0], 0.051);
  check_close(values(opt->state()[1])[0], 0.0002601 * 0.99998712540);
}

TEST_CASE("adam: first step without bias correction") {
  // bc1 = bc2 = 1, wd 0:  p=1, g=0.5: m = 0.05, v = 0.00025, sqrt(v) = 0.0158113883
  //   u = 0.05/(0.0158113883 + 1e-8) = 3.16227566;  p = 1 − 0.00316227566 = 0.99683772434
  // p=−2, g=−0.25: m = −0.025, sqrt(v) = 0.00790569415, u = −3.16227366;  p = −1.99683772634
  auto opt = adam(true, 0.0, /*bias_correction=*/false, 2);
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -0.25f};
  opt->step(p.data(), g.data(), 2, {}, 1e-3, 1);
  check_close(p[0], 0.99683772434);
  check_close(p[1], -1.99683772634);
}

TEST_CASE("adam: three AdamW steps") {
  // lr 1e-2, wd 0.1, p0 = 1, grads 0.5, −0.5, 0.25.
  // t=1: m = 0.05, v = 0.00025, bc = (0.1, 0.001): m̂ = 0.5, v̂ = 0.25
  //      u = 0.5/0.50000001 + 0.1·1 = 1.09999998;       p = 1 − 0.0109999998 = 0.9890000002
  // t=2: m = 0.045 − 0.05 = −0.005, v = 0.00024975 + 0.00025 = 0.00049975, bc = (0.19, 0.001999)
  //      m̂ = −0.0263157895, v̂ = 0.25;  u = −0.0526315779 + 0.0989 = 0.0462684221;  p = 0.9885373160
  // t=3: m = −0.0045 + 0.025 = 0.0205, v = 0.00049925025 + 0.0000625 = 0.00056175025,
  //      bc = (0.271, 0.002997001): m̂ = 0.0756457565, sqrt(v̂) = 0.4329404789
  //      u = 0.1747259301 + 0.0988537316 = 0.2735796617 (≈);  p = 0.9885373160 − 0.0027357926 = 0.9858015234
  auto opt = adam(true, 0.1, true, 1);
  std::vector<float> p = {1.0f};
  const double want[] = {0.9890000002, 0.9885373159787, 0.9858015233612};
  const float grads[] = {0.5f, -0.5f, 0.25f};
  for (int t = 1; t <= 3; ++t) {
    CAPTURE(t);
    opt->step(p.data(), &grads[t - 1], 1, {}, 1e-2, t);
    check_close(p[0], want[t - 1]);
  }
  check_close(values(opt->state()[0])[0], 0.0205);
  // v = (0.999²·0.25 + 0.999·0.25 + 0.0625)·(1 − β2) with the fp32 β2: 0.00056174303
  check_close(values(opt->state()[1])[0], 0.00056174303);
}

TEST_CASE("adam: set_betas takes effect on the next step") {
  // wd 0, lr 1e-3. t=1 with (0.9, 0.999): p = 1 − 1e-3·0.99999998 = 0.99900000002, m = 0.05, v = 0.00025.
  // t=2 with (0.5, 0.99), g = 0.5: m = 0.025 + 0.25 = 0.275, v = 0.0002475 + 0.0025 = 0.0027475,
  //   bc = (1 − 0.25, 1 − 0.9801) = (0.75, 0.0199): m̂ = 0.3666667, sqrt(v̂) = 0.3715711
  //   u = 0.9867999;  p = 0.99900000002 − 0.0009867999 = 0.9980132001
  auto opt = adam(true, 0.0, true, 1);
  std::vector<float> p = {1.0f}, g = {0.5f};
  opt->step(p.data(), g.data(), 1, {}, 1e-3, 1);
  opt->set_betas(0.5, 0.99);
  opt->step(p.data(), g.data(), 1, {}, 1e-3, 2);
  check_close(p[0], 0.9980132000982);
}

TEST_CASE("adam: argument checks") {
  auto opt = adam(true, 0.0, true, 2);
  std::vector<float> p(2), g(2);
  CHECK_THROWS_AS(opt->step(p.data(), g.data(), 3, {}, 1e-3, 1), std::invalid_argument);
  CHECK_THROWS_AS(opt->step(p.data(), g.data(), 2, {}, 1e-3, 0), std::invalid_argument);
}
