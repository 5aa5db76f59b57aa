// gelu: tanh-approximation GELU forward/backward, fast fp32 path (through σ(2u), see gelu.h;
// vectorised with exp_approx, split over the kernel threads) and the literal double reference.
#include "cpu/gelu.h"

#include <cmath>

#include "cpu/gelu_element.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // √(2/π)
constexpr double kCubic = 0.044715;
// exp_approx as the element bodies' e^x (gelu_element.h).
struct ExpApprox {
  float operator()(float x) const { return exp_approx(x); }
};

DS_KERNEL_CLONES void forward_range(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_forward_element(x[i], ExpApprox{});
}

DS_KERNEL_CLONES void backward_range(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = gelu_backward_element(x[i], dy[i], ExpApprox{});
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n) {
  parallel_for(n, kMinElementsPerThread, [&](int64_t begin, int64_t end) { forward_range(x + begin, y + begin, end - begin); });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  parallel_for(n, kMinElementsPerThread,
               [&](int64_t begin, int64_t end) { backward_range(x + begin, dy + begin, dx + begin, end - begin); });
}

void gelu_forward_reference(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = kSqrt2OverPi * (v + kCubic * v * v * v);
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(u)));
  }
}

void gelu_backward_reference(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const double th = std::tanh(u);
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kCubic * v * v);
    const double g = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * du;
    dx[i] = static_cast<float>(static_cast<double>(dy[i]) * g);
  }
}

}  // namespace ds::cpu
