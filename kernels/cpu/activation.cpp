// activation: ReLU forward/backward, fast (branch-free, vectorisable) and scalar reference.
#include "cpu/activation.h"

#include <cmath>

namespace ds::cpu {

// No __restrict here: in-place use (y == x) is allowed, and an elementwise loop reading x[i]
// before writing y[i] vectorises fine without it.
void relu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v <= 0.0f ? 0.0f : v;  // NaN <= 0 is false: NaN passes through
  }
}

void relu_forward_reference(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i]))
      y[i] = x[i];
    else if (x[i] > 0.0f)
      y[i] = x[i];
    else
      y[i] = 0.0f;
  }
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = x[i] > 0.0f ? g : 0.0f;
  }
}

void relu_backward_reference(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > 0.0f)
      dx[i] = dy[i];
    else
      dx[i] = 0.0f;
  }
}

}  // namespace ds::cpu
