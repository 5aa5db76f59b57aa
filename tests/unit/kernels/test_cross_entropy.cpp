// Softmax cross-entropy: fast vs reference, stability on huge logits, label checks, NaN
// propagation, determinism. (The gradient against central differences:
// tests/unit/backend/test_backend_ops.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "cpu/cross_entropy.h"
#include "kernel_test_util.h"

using ds::test::Rng;

namespace {

std::vector<int32_t> random_labels(Rng& rng, int64_t rows, int64_t classes) {
  std::vector<int32_t> y(rows);
  for (auto& v : y) v = static_cast<int32_t>(rng.below(classes));
  return y;
}

}  // namespace

TEST_CASE("cross_entropy matches the reference") {
  Rng rng(31);
  const int64_t shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {64, 10}, {33, 1000}, {5, 50257}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], classes = s[1];
    const std::string dims = std::to_string(rows) + "x" + std::to_string(classes);
    const auto logits = ds::test::random_vec(rng, rows * classes, -8.0f, 8.0f);
    const auto labels = random_labels(rng, rows, classes);
    std::vector<float> stats(2 * rows), statsr(2 * rows), d(rows * classes), dr(rows * classes);
    const float loss = ds::cpu::cross_entropy_forward(logits.data(), labels.data(), rows, classes, stats.data());
    const float lossr =
        ds::cpu::cross_entropy_forward_reference(logits.data(), labels.data(), rows, classes, statsr.data());
    ds::test::check_close("cross_entropy loss " + dims, &loss, &lossr, 1, 1e-6, 1e-6);
    ds::test::check_close("cross_entropy stats " + dims, stats.data(), statsr.data(), stats.size(), 1e-6, 1e-6);
    ds::cpu::cross_entropy_backward(logits.data(), labels.data(), stats.data(), 0.75f, rows, classes, d.data());
    ds::cpu::cross_entropy_backward_reference(logits.data(), labels.data(), statsr.data(), 0.75f, rows, classes,
                                              dr.data());
    ds::test::check_close("cross_entropy dlogits " + dims, d.data(), dr.data(), d.size(), 1e-7, 1e-5);
  }
}

TEST_CASE("cross_entropy is stable on huge logits") {
  // Naive exp overflows at 89; log-sum-exp does not care about a common shift.
  const std::vector<float> logits{1000.0f, 1001.0f, 999.0f, -1000.0f, -1001.0f, -999.0f};
  const std::vector<int32_t> labels{1, 2};
  std::vector<float> stats(4), d(6);
  const float loss = ds::cpu::cross_entropy_forward(logits.data(), labels.data(), 2, 3, stats.data());
  // Row 0: lse − 1001 = log(1 + e^-1 + e^-2); row 1: lse + 999, the same.
  const double expect = std::log(1.0 + std::exp(-1.0) + std::exp(-2.0));
  CHECK(loss == doctest::Approx(expect).epsilon(1e-6));
  ds::cpu::cross_entropy_backward(logits.data(), labels.data(), stats.data(), 1.0f, 2, 3, d.data());
  // Both rows are softmax over shifts (-1, 0, -2) (row 0) and (-1, -2, 0) (row 1), halved (mean over
  // 2 rows), minus the one-hot of the label.
  const double z = 1.0 + std::exp(-1.0) + std::exp(-2.0);
  const double expect_d[] = {std::exp(-1.0) / z / 2, (1.0 / z - 1) / 2, std::exp(-2.0) / z / 2,
                             std::exp(-1.0) / z / 2, std::exp(-2.0) / z / 2, (1.0 / z - 1) / 2};
  for (int i = 0; i < 6; ++i) CHECK(d[i] == doctest::Approx(expect_d[i]).epsilon(1e-6));
}

TEST_CASE("cross_entropy rejects bad labels and propagates NaN") {
  std::vector<float> logits{0.1f, 0.2f, 0.3f, 0.4f}, stats(4), d(4);
  std::vector<int32_t> bad{0, 2};
  try {
    ds::cpu::cross_entropy_forward(logits.data(), bad.data(), 2, 2, stats.data());
    FAIL("no exception");
  } catch (const std::out_of_range& e) {
    CHECK(std::string(e.what()) == "cross_entropy: label 2 at row 1 is not in [0, 2)");
  }
  bad = {-1, 0};
  CHECK_THROWS_AS(ds::cpu::cross_entropy_backward(logits.data(), bad.data(), stats.data(), 1.0f, 2, 2, d.data()),
                  std::out_of_range);
  const std::vector<int32_t> ok{0, 1};
  logits[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(ds::cpu::cross_entropy_forward(logits.data(), ok.data(), 2, 2, stats.data())));
  logits[1] = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(ds::cpu::cross_entropy_forward(logits.data(), ok.data(), 2, 2, stats.data())));
}

TEST_CASE("cross_entropy is bit-identical run to run") {
  Rng rng(4);
  const int64_t rows = 129, classes = 37;
  const auto logits = ds::test::random_vec(rng, rows * classes, -5.0f, 5.0f);
  const auto labels = random_labels(rng, rows, classes);
  std::vector<float> a(2 * rows), b(2 * rows), da(rows * classes), db(rows * classes);
  const float la = ds::cpu::cross_entropy_forward(logits.data(), labels.data(), rows, classes, a.data());
  const float lb = ds::cpu::cross_entropy_forward(logits.data(), labels.data(), rows, classes, b.data());
  CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  ds::cpu::cross_entropy_backward(logits.data(), labels.data(), a.data(), 1.0f, rows, classes, da.data());
  ds::cpu::cross_entropy_backward(logits.data(), labels.data(), b.data(), 1.0f, rows, classes, db.data());
  CHECK(ds::test::bit_identical(a, b));
  CHECK(ds::test::bit_identical(da, db));
}
