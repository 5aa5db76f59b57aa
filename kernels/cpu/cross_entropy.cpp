// cross_entropy: softmax cross-entropy forward/backward, fast path and scalar reference.
// The fast path evaluates exp in fp32 (x − m is exact enough in fp32; exp_approx, vectorised) and
// splits rows over the kernel threads (the loss is summed over rows in order afterwards); the
// reference works in double throughout.
#include "cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

void check_label(const int32_t* labels, int64_t r, int64_t classes) {
  const int32_t y = labels[r];
  if (y < 0 || y >= classes)
    throw std::out_of_range("cross_entropy: label " + std::to_string(y) + " at row " +
                            std::to_string(r) + " is not in [0, " + std::to_string(classes) + ")");
}

// max of the row; NaN if any element is NaN (so the loss becomes NaN, not a silent wrong value).
float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t c = 0; c < n; ++c) {
    m = x[c] > m ? x[c] : m;
    nan |= std::isnan(x[c]);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// out[c] = e^((x[c] − m) − l)·scale for c < n. x − m first: exact for the large logits where
// m + l would round.
DS_KERNEL_CLONES void shifted_exp(const float* x, float* out, int64_t n, float m, float l, float scale) {
  for (int64_t c = 0; c < n; ++c) out[c] = exp_approx((x[c] - m) - l) * scale;
}

}  // namespace

float cross_entropy_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                            float* stats) {
  if (rows <= 0) return 0.0f;
  for (int64_t r = 0; r < rows; ++r) check_label(labels, r, classes);
  std::vector<double> row_loss(static_cast<size_t>(rows));
  parallel_for(rows, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    std::vector<float> e(static_cast<size_t>(classes));
    for (int64_t r = begin; r < end; ++r) {
      const float* x = logits + r * classes;
      // m = ±inf makes x − m NaN for some element, and the NaN propagates to the loss.
      const float m = row_max(x, classes);
      shifted_exp(x, e.data(), classes, m, 0.0f, 1.0f);
      double s = 0.0;
      for (int64_t c = 0; c < classes; ++c) s += e[c];
      const double log_s = std::log(s);
      stats[2 * r] = m;
      stats[2 * r + 1] = static_cast<float>(log_s);
      row_loss[r] = (static_cast<double>(m) - x[labels[r]]) + log_s;
    }
  });
  double total = 0.0;
  for (double l : row_loss) total += l;
  return static_cast<float>(total / static_cast<double>(rows));
}

float cross_entropy_forward_reference(const float* logits, const int32_t* labels, int64_t rows,
                                      int64_t classes, float* stats) {
  if (rows <= 0) return 0.0f;
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    check_label(labels, r, classes);
    const float* x = logits + r * classes;
    double m = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t c = 0; c < classes; ++c) {
      if (x[c] > m) m = x[c];
      if (std::isnan(x[c])) nan = true;
    }
    if (nan) m = std::numeric_limits<double>::quiet_NaN();
    double s = 0.0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(static_cast<double>(x[c]) - m);
    stats[2 * r] = static_cast<float>(m);
    stats[2 * r + 1] = static_cast<float>(std::log(s));
    total += m + std::log(s) - static_cast<double>(x[labels[r]]);
  }
  return static_cast<float>(total / static_cast<double>(rows));
}

void cross_entropy_backward(const float* logits, const int32_t* labels, const float* stats, float g,
                            int64_t rows, int64_t classes, float* dlogits) {
  if (rows <= 0) return;
  for (int64_t r = 0; r < rows; ++r) check_label(labels, r, classes);
  const float scale = static_cast<float>(static_cast<double>(g) / static_cast<double>(rows));
  parallel_for(rows, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* d = dlogits + r * classes;
      shifted_exp(logits + r * classes, d, classes, stats[2 * r], stats[2 * r + 1], scale);
      d[labels[r]] -= scale;
    }
  });
}

void cross_entropy_backward_reference(const float* logits, const int32_t* labels, const float* stats,
                                      float g, int64_t rows, int64_t classes, float* dlogits) {
  if (rows <= 0) return;
  const double scale = static_cast<double>(g) / static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    check_label(labels, r, classes);
    const double m = stats[2 * r], log_s = stats[2 * r + 1];
    for (int64_t c = 0; c < classes; ++c) {
      const double p = std::exp(static_cast<double>(logits[r * classes + c]) - m - log_s);
      const double onehot = c == labels[r] ? 1.0 : 0.0;
      dlogits[r * classes + c] = static_cast<float>((p - onehot) * scale);
    }
  }
}

}  // namespace ds::cpu
