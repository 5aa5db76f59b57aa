// A Linear layer built from the kernels (y = x·Wᵀ + b via matmul + bias_add; dx = dy·W,
// dW += dyᵀ·x, db += Σ dy) checked against central differences of L = Σ r ⊙ y, and its
// forward+backward checked bit-identical across two runs.
#include <doctest/doctest.h>


#include "cpu/bias.h"
#include "cpu/matmul.h"
#include "kernel_test_util.h"

using ds::test::Rng;

namespace {

constexpr int64_t n = 5, in = 7, out = 3;

std::vector<float> linear(const std::vector<float>& x, const std::vector<float>& W, const std::vector<float>& b) {
  std::vector<float> y(n * out);
  ds::cpu::matmul(x.data(), W.data(), y.data(), n, out, in, false, true, false);
  ds::cpu::bias_add(y.data(), b.data(), n, out);
  return y;
}

double objective(const std::vector<float>& y, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(r[i]) * y[i];
  return s;
}

struct Grads {
  std::vector<float> dx, dW, db;
};

Grads backward(const std::vector<float>& x, const std::vector<float>& W, const std::vector<float>& dy) {
  Grads g{std::vector<float>(n * in), std::vector<float>(out * in, 0.0f), std::vector<float>(out, 0.0f)};
  ds::cpu::matmul(dy.data(), W.data(), g.dx.data(), n, in, out, false, false, false);
  ds::cpu::matmul(dy.data(), x.data(), g.dW.data(), out, in, n, true, false, true);
  ds::cpu::bias_grad(dy.data(), g.db.data(), n, out);
  return g;
}

}  // namespace

TEST_CASE("linear (matmul + bias) gradients match central differences") {
  Rng rng(17);
  auto x = ds::test::random_vec(rng, n * in), W = ds::test::random_vec(rng, out * in),
       b = ds::test::random_vec(rng, out);
  const auto r = ds::test::random_vec(rng, n * out);
  const Grads g = backward(x, W, r);  // dL/dy = r
  auto f = [&] { return objective(linear(x, W, b), r); };
  const auto ndx = ds::test::central_differences(x, f), ndW = ds::test::central_differences(W, f),
             ndb = ds::test::central_differences(b, f);
  ds::test::check_close("linear dx vs central differences", g.dx.data(), ndx.data(), ndx.size(), 1e-4, 1e-3);
  ds::test::check_close("linear dW vs central differences", g.dW.data(), ndW.data(), ndW.size(), 1e-4, 1e-3);
  ds::test::check_close("linear db vs central differences", g.db.data(), ndb.data(), ndb.size(), 1e-4, 1e-3);
}

TEST_CASE("linear forward and backward are bit-identical run to run") {
  Rng rng(18);
  const auto x = ds::test::random_vec(rng, n * in), W = ds::test::random_vec(rng, out * in),
             b = ds::test::random_vec(rng, out), r = ds::test::random_vec(rng, n * out);
  CHECK(ds::test::bit_identical(linear(x, W, b), linear(x, W, b)));
  const Grads g1 = backward(x, W, r), g2 = backward(x, W, r);
  CHECK(ds::test::bit_identical(g1.dx, g2.dx));
  CHECK(ds::test::bit_identical(g1.dW, g2.dW));
  CHECK(ds::test::bit_identical(g1.db, g2.db));
}
