// Muon's Newton–Schulz orthogonalization (cpu/newton_schulz.h) against its spectral form: for x = U·diag(σ)·Vᵀ with
// U and V orthogonal, the iteration leaves the singular vectors alone and maps each normalized singular value s to
// q⁵(s), q(s) = a·s + b·s³ + c·s⁵. The test builds x from Householder reflections and known σ, and compares the
// output with U·diag(q⁵(σ / (‖σ‖ + 1e-7)))·Vᵀ formed in double.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "cpu/newton_schulz.h"

namespace {

using Matrix = std::vector<double>;  // row-major

// I − 2·v·vᵀ/(vᵀv): a random orthogonal n × n matrix.
Matrix householder(int n, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  double norm_sq = 0.0;
  for (double& x : v) {
    x = normal(rng);
    norm_sq += x * x;
  }
  Matrix h(static_cast<size_t>(n * n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      h[static_cast<size_t>(i * n + j)] = (i == j ? 1.0 : 0.0) - 2.0 * v[static_cast<size_t>(i)] * v[static_cast<size_t>(j)] / norm_sq;
  return h;
}

// U[:, :k]·diag(d)·V[:, :k]ᵀ as rows × cols, k = min(rows, cols).
Matrix compose(const Matrix& u, const Matrix& v, const std::vector<double>& d, int rows, int cols) {
  Matrix out(static_cast<size_t>(rows * cols), 0.0);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      for (size_t k = 0; k < d.size(); ++k)
        out[static_cast<size_t>(i * cols + j)] +=
            u[static_cast<size_t>(i * rows) + k] * d[k] * v[static_cast<size_t>(j * cols) + k];
  return out;
}

double quintic_five_times(double s) {
  for (int step = 0; step < ds::cpu::kNewtonSchulzSteps; ++step)
    s = ds::cpu::kNewtonSchulzA * s + ds::cpu::kNewtonSchulzB * s * s * s + ds::cpu::kNewtonSchulzC * s * s * s * s * s;
  return s;
}

}  // namespace

TEST_CASE("newton_schulz: U·q⁵(S)·Vᵀ for x = U·S·Vᵀ, wide, tall and square, and zeros for zeros") {
  std::mt19937 rng(7);
  for (auto [rows, cols] : {std::pair{3, 5}, std::pair{5, 3}, std::pair{4, 4}, std::pair{1, 6}, std::pair{24, 40},
                            std::pair{40, 24}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const int k = std::min(rows, cols);
    std::vector<double> sigma(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) sigma[static_cast<size_t>(i)] = 3.0 / (1.0 + i);  // a spread of 3 to 3/k
    const Matrix u = householder(rows, rng), v = householder(cols, rng);
    const Matrix x = compose(u, v, sigma, rows, cols);
    double norm = 0.0;
    for (double s : sigma) norm += s * s;
    norm = std::sqrt(norm);
    std::vector<double> mapped;
    for (double s : sigma) mapped.push_back(quintic_five_times(s / (norm + 1e-7)));
    const Matrix want = compose(u, v, mapped, rows, cols);

    std::vector<float> x32(x.begin(), x.end()), out(x.size(), -1.0f);
    ds::cpu::newton_schulz(x32.data(), out.data(), rows, cols);
    double worst = 0.0;
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - want[i]));
    CHECK(worst < 2e-5);
    for (double m : mapped) {  // (what makes it an orthogonalization: every direction comes out at about unit size)
      CHECK(m > 0.5);
      CHECK(m < 1.3);
    }
  }
  std::vector<float> zeros(12, 0.0f), out(12, 1.0f);
  ds::cpu::newton_schulz(zeros.data(), out.data(), 3, 4);
  CHECK(out == zeros);
  CHECK_THROWS_AS(ds::cpu::newton_schulz(zeros.data(), out.data(), 0, 4), std::invalid_argument);
}
