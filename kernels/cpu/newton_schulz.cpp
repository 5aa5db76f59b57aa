// Muon's Newton–Schulz orthogonalization (newton_schulz.h).
#include "cpu/newton_schulz.h"

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cpu/matmul.h"

namespace ds::cpu {

void newton_schulz(const float* x, float* out, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) throw std::invalid_argument("newton_schulz: a matrix needs rows and columns");
  const bool tall = rows > cols;
  const int64_t n = tall ? cols : rows, m = tall ? rows : cols;  // X is n × m, n ≤ m
  const auto count = static_cast<size_t>(n * m);
  std::vector<float> X(count), next(count), A(static_cast<size_t>(n * n)), A2(A.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) X[static_cast<size_t>(i * m + j)] = tall ? x[j * cols + i] : x[i * cols + j];
  double sum_sq = 0.0;
  for (float v : X) sum_sq += static_cast<double>(v) * v;
  const float denominator = static_cast<float>(std::sqrt(sum_sq)) + 1e-7f;
  for (float& v : X) v /= denominator;
  for (int step = 0; step < kNewtonSchulzSteps; ++step) {
    matmul(X.data(), X.data(), A.data(), n, n, m, false, true, false);  // A = X·Xᵀ
    matmul(A.data(), A.data(), A2.data(), n, n, n, false, false, false);
    for (size_t k = 0; k < A.size(); ++k) A[k] = kNewtonSchulzB * A[k] + kNewtonSchulzC * A2[k];  // B
    for (size_t k = 0; k < count; ++k) next[k] = kNewtonSchulzA * X[k];
    matmul(A.data(), X.data(), next.data(), n, m, n, false, false, true);  // a·X + B·X
    std::swap(X, next);
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) (tall ? out[j * cols + i] : out[i * cols + j]) = X[static_cast<size_t>(i * m + j)];
}

}  // namespace ds::cpu
