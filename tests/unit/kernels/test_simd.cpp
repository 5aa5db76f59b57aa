// exp_approx (the vectorisable fp32 e^x behind GELU, softmax and cross-entropy) against double exp
// over its whole finite range, and its special values.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cpu/simd.h"

TEST_CASE("exp_approx is within 2 ulp of e^x over its range") {
  // Every 97th float from −86.6 to 88.7 (~20 M values): the error in units of the last place of
  // the correctly rounded result, measured against double exp.
  double worst = 0.0;
  float worst_x = 0.0f;
  int64_t count = 0;
  for (float x = -86.6f; x < 88.7f;) {
    const double want = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    const double err = std::fabs(static_cast<double>(ds::cpu::exp_approx(x)) - want) / ulp;
    if (err > worst) worst = err, worst_x = x;
    ++count;
    for (int i = 0; i < 97; ++i) x = std::nextafter(x, 100.0f);
  }
  INFO("worst ", worst, " ulp at x = ", worst_x, " over ", count, " values");
  CHECK(count > 10'000'000);
  CHECK(worst <= 2.0);
}

TEST_CASE("exp_approx special values") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(ds::cpu::exp_approx(0.0f) == 1.0f);
  CHECK(ds::cpu::exp_approx(-0.0f) == 1.0f);
  CHECK(ds::cpu::exp_approx(inf) == inf);
  CHECK(ds::cpu::exp_approx(88.73f) == inf);  // e^88.73 > FLT_MAX
  CHECK(std::isfinite(ds::cpu::exp_approx(88.72f)));
  CHECK(ds::cpu::exp_approx(-inf) == 0.0f);
  CHECK(ds::cpu::exp_approx(-87.0f) == 0.0f);  // flushed (e^−87 = 1.6e−38, near FLT_MIN)
  CHECK(ds::cpu::exp_approx(-86.6f) > 0.0f);
  CHECK(std::isnan(ds::cpu::exp_approx(std::numeric_limits<float>::quiet_NaN())));
}
