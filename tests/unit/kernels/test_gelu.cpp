// GELU (tanh approximation): fast (σ form, fp32) vs the literal double reference, special values
// and saturation, in-place use, determinism. (Gradients against central differences:
// tests/unit/backend/test_backend_ops.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cpu/gelu.h"
#include "kernel_test_util.h"

using ds::test::Rng;

TEST_CASE("gelu matches the reference") {
  // Inputs in [-8, 8): the saturated tails on both sides and the curved middle. The fast path's
  // error is a few fp32 roundings of u, exp and the quotient: relative ~1e-6 where σ(2u) is tiny
  // (x < −3), so rtol 1e-5; atol 1e-7 covers values near 0 and the reference's own cancellation
  // in 1 + tanh(u) for very negative x.
  Rng rng(41);
  for (int64_t n : {1, 7, 64, 1001, 3 * 768}) {
    const auto x = ds::test::random_vec(rng, n, -8.0f, 8.0f), dy = ds::test::random_vec(rng, n);
    std::vector<float> y(n), yr(n), dx(n), dxr(n);
    ds::cpu::gelu_forward(x.data(), y.data(), n);
    ds::cpu::gelu_forward_reference(x.data(), yr.data(), n);
    ds::test::check_close("gelu y n=" + std::to_string(n), y.data(), yr.data(), n, 1e-7, 1e-5);
    ds::cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
    ds::cpu::gelu_backward_reference(x.data(), dy.data(), dxr.data(), n);
    ds::test::check_close("gelu dx n=" + std::to_string(n), dx.data(), dxr.data(), n, 1e-7, 1e-5);
  }
}

TEST_CASE("gelu special values and saturation") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{nan, inf, -inf, 0.0f, 100.0f, -100.0f, 1e20f, -1e20f, 3e38f, -3e38f};
  const std::vector<float> ones(x.size(), 1.0f);
  const size_t n = x.size();
  std::vector<float> y(n), yr(n), dx(n);
  ds::cpu::gelu_forward(x.data(), y.data(), n);
  ds::cpu::gelu_forward_reference(x.data(), yr.data(), n);
  ds::cpu::gelu_backward(x.data(), ones.data(), dx.data(), n);
  CHECK(std::isnan(y[0]));
  CHECK(std::isnan(yr[0]));
  CHECK(std::isnan(dx[0]));
  CHECK(y[1] == inf);
  CHECK(yr[1] == inf);
  CHECK(std::isnan(y[2]));  // −inf·0, as PyTorch
  CHECK(std::isnan(yr[2]));
  CHECK(y[3] == 0.0f);
  CHECK(dx[3] == 0.5f);  // gelu'(0) = 1/2
  // Saturated: gelu(x) = x for large x, 0 for very negative x, and the derivative 1 or 0 — without
  // inf·0 = NaN where x³ overflows.
  for (size_t i = 4; i < n; i += 2) {
    CHECK(y[i] == x[i]);
    CHECK(y[i + 1] == 0.0f);
    CHECK(dx[i] == 1.0f);
    CHECK(dx[i + 1] == 0.0f);
  }
}

TEST_CASE("gelu works in place") {
  Rng rng(42);
  const int64_t n = 33;
  const auto x = ds::test::random_vec(rng, n, -4.0f, 4.0f), dy = ds::test::random_vec(rng, n);
  std::vector<float> y(n), dx(n);
  ds::cpu::gelu_forward(x.data(), y.data(), n);
  ds::cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
  auto xi = x, gi = dy;
  ds::cpu::gelu_backward(xi.data(), gi.data(), gi.data(), n);
  ds::cpu::gelu_forward(xi.data(), xi.data(), n);
  CHECK(ds::test::bit_identical(xi, y));
  CHECK(ds::test::bit_identical(gi, dx));
}

TEST_CASE("gelu is bit-identical run to run") {
  Rng rng(44);
  const int64_t n = 4099;
  const auto x = ds::test::random_vec(rng, n, -6.0f, 6.0f), dy = ds::test::random_vec(rng, n);
  std::vector<float> y1(n), y2(n), d1(n), d2(n);
  ds::cpu::gelu_forward(x.data(), y1.data(), n);
  ds::cpu::gelu_forward(x.data(), y2.data(), n);
  ds::cpu::gelu_backward(x.data(), dy.data(), d1.data(), n);
  ds::cpu::gelu_backward(x.data(), dy.data(), d2.data(), n);
  CHECK(ds::test::bit_identical(y1, y2));
  CHECK(ds::test::bit_identical(d1, d2));
}
