// gelu: tanh-approximation GELU forward/backward, fast fp32 path (through σ(2u), see gelu.h;
// vectorised with exp_approx, split over the kernel threads) and the literal double reference.
#include "cpu/gelu.h"

#include <cmath>

#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // √(2/π)
constexpr double kCubic = 0.044715;
DS_KERNEL_CLONES void forward_range(const float* x, float* y, int64_t n) {
  constexpr float c = static_cast<float>(kSqrt2OverPi), a = static_cast<float>(kCubic);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = c * (v + a * v * v * v);
    // x·σ(2u). For very negative x, e^(−2u) overflows to inf and y = x/inf = −0, the right limit.
    y[i] = v / (1.0f + exp_approx(-2.0f * u));
  }
}

DS_KERNEL_CLONES void backward_range(const float* x, const float* dy, float* dx, int64_t n) {
  constexpr float c = static_cast<float>(kSqrt2OverPi), a = static_cast<float>(kCubic);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = c * (v + a * v * v * v);
    const float du2 = 2.0f * c * (1.0f + 3.0f * a * v * v);  // d(2u)/dx
    // gelu' = σ + x·(d(2u)/dx)·σ(1 − σ), σ = σ(2u). With t = e^(−2|u|) ∈ [0, 1] (never overflows):
    // σ = 1/(1+t) for u ≥ 0, t/(1+t) for u < 0, and σ(1 − σ) = t/(1+t)² either way.
    // Both sides of each select are computed first, so the selects compile to blends, not to
    // branches that mispredict on the sign of x.
    const float t = exp_approx(-2.0f * std::fabs(u));
    const float d = 1.0f / (1.0f + t);
    const float td = t * d;
    const float s = u >= 0.0f ? d : td;  // NaN u: NaN t, so s is NaN
    // t = 0 once |u| > 43.3 (exp_approx flushes e^(−86.6) = 2.4e−38 to 0): the term is 0 there
    // even where x·du2 has overflowed (|x| > ~1e12), instead of inf·0 = NaN.
    const float term = v * du2 * td * d;
    const float k = t > 0.0f ? term : 0.0f;
    dx[i] = dy[i] * (s + k);
  }
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
