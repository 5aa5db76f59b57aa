// bias: add and fill over rows and column-sum gradient, fast vs reference; accumulation; determinism.
#include <doctest/doctest.h>

#include <algorithm>

#include "cpu/bias.h"
#include "kernel_test_util.h"

using ds::test::Rng;

TEST_CASE("bias_add and bias_grad match the reference") {
  Rng rng(11);
  const int64_t shapes[][2] = {{1, 1}, {1, 13}, {17, 1}, {7, 5}, {33, 129}, {1000, 10}, {3, 4099}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    const std::string dims = std::to_string(rows) + "x" + std::to_string(cols);
    const auto bias = ds::test::random_vec(rng, cols);
    auto y = ds::test::random_vec(rng, rows * cols), yr = y;
    ds::cpu::bias_add(y.data(), bias.data(), rows, cols);
    ds::cpu::bias_add_reference(yr.data(), bias.data(), rows, cols);
    CHECK(ds::test::bit_identical(y, yr));  // one fp32 add per element: exact agreement
    auto filled = y;  // bias_fill overwrites every row with the bias
    ds::cpu::bias_fill(filled.data(), bias.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      CHECK(std::equal(bias.begin(), bias.end(), filled.begin() + r * cols));

    const auto dy = ds::test::random_vec(rng, rows * cols);
    auto db = ds::test::random_vec(rng, cols), dbr = db;  // nonzero: grads accumulate (+=)
    ds::cpu::bias_grad(dy.data(), db.data(), rows, cols);
    ds::cpu::bias_grad_reference(dy.data(), dbr.data(), rows, cols);
    ds::test::check_close("bias_grad " + dims, db.data(), dbr.data(), cols, 2e-7 * static_cast<double>(rows + 1),
                          1e-6);
  }
}

TEST_CASE("bias_grad accumulates and is deterministic") {
  Rng rng(5);
  const int64_t rows = 301, cols = 77;
  const auto dy = ds::test::random_vec(rng, rows * cols);
  std::vector<float> once(cols, 0.0f), twice(cols, 0.0f), again(cols, 0.0f);
  ds::cpu::bias_grad(dy.data(), once.data(), rows, cols);
  ds::cpu::bias_grad(dy.data(), again.data(), rows, cols);
  CHECK(ds::test::bit_identical(once, again));
  ds::cpu::bias_grad(dy.data(), twice.data(), rows, cols);
  ds::cpu::bias_grad(dy.data(), twice.data(), rows, cols);
  for (int64_t c = 0; c < cols; ++c) CHECK(twice[c] == doctest::Approx(2 * once[c]).epsilon(1e-6));
}
