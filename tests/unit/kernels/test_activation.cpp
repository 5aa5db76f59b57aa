// ReLU forward/backward: fast vs reference (bit-exact: no arithmetic), NaN and zero conventions,
// in-place use. (Gradients against central differences: tests/unit/backend/test_backend_ops.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cpu/activation.h"
#include "kernel_test_util.h"

using ds::test::Rng;

TEST_CASE("relu matches the reference including NaN and ±0 and ±inf") {
  Rng rng(21);
  for (int64_t n : {1, 7, 64, 1001}) {
    auto x = ds::test::random_vec(rng, n);
    if (n > 4) {
      x[0] = std::numeric_limits<float>::quiet_NaN();
      x[1] = -0.0f;
      x[2] = std::numeric_limits<float>::infinity();
      x[3] = -std::numeric_limits<float>::infinity();
    }
    const auto dy = ds::test::random_vec(rng, n);
    std::vector<float> y(n), yr(n), dx(n), dxr(n);
    ds::cpu::relu_forward(x.data(), y.data(), n);
    ds::cpu::relu_forward_reference(x.data(), yr.data(), n);
    CHECK(ds::test::bit_identical(y, yr));
    ds::cpu::relu_backward(x.data(), dy.data(), dx.data(), n);
    ds::cpu::relu_backward_reference(x.data(), dy.data(), dxr.data(), n);
    CHECK(ds::test::bit_identical(dx, dxr));
    if (n > 4) {
      CHECK(std::isnan(y[0]));
      CHECK(y[1] == 0.0f);
      CHECK(dx[1] == 0.0f);  // derivative at 0 is 0
      CHECK(y[2] == std::numeric_limits<float>::infinity());
      CHECK(y[3] == 0.0f);
    }
  }
}

TEST_CASE("relu works in place") {
  std::vector<float> x{-1.0f, 2.0f, -3.0f, 4.0f}, g{1.0f, 1.0f, 1.0f, 1.0f};
  const auto x0 = x;
  ds::cpu::relu_backward(x.data(), g.data(), g.data(), 4);
  ds::cpu::relu_forward(x.data(), x.data(), 4);
  CHECK(x == std::vector<float>{0.0f, 2.0f, 0.0f, 4.0f});
  CHECK(g == std::vector<float>{0.0f, 1.0f, 0.0f, 1.0f});
}
