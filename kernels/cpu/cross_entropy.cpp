// cross_entropy: softmax cross-entropy forward/backward, fast path and scalar reference.
// The fast path evaluates exp in fp32 (x − m is exact enough in fp32); the reference works in
// double throughout.
#include "cpu/cross_entropy.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

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

}  // namespace

float cross_entropy_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                            float* stats) {
  if (rows <= 0) return 0.0f;
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    check_label(labels, r, classes);
    const float* x = logits + r * classes;
    // m = ±inf makes x − m NaN for some element, and the NaN propagates to the loss.
    const float m = row_max(x, classes);
    double s = 0.0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(x[c] - m);
    const double log_s = std::log(s);
    stats[2 * r] = m;
    stats[2 * r + 1] = static_cast<float>(log_s);
    total += (static_cast<double>(m) - x[labels[r]]) + log_s;
  }
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
  const float scale = static_cast<float>(static_cast<double>(g) / static_cast<double>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    check_label(labels, r, classes);
    const float* x = logits + r * classes;
    float* d = dlogits + r * classes;
    const float m = stats[2 * r], log_s = stats[2 * r + 1];
    for (int64_t c = 0; c < classes; ++c) d[c] = std::exp((x[c] - m) - log_s) * scale;
    d[labels[r]] -= scale;
  }
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
