// The GELU element bodies (formulas and the σ(2u) identity: gelu.h), shared by the CPU loops (gelu.cpp,
// with the vectorisable exp_approx) and the CUDA kernels (kernels/cuda/gelu.cuh, with CUDA's expf).
// `Exp` is the e^x to use; the rest of the arithmetic is the same on both.
#pragma once
#include <math.h>

#include "simt/hd.h"

namespace ds::cpu {

inline constexpr float kGeluC = 0.79788456080286535588f;  // √(2/π)
inline constexpr float kGeluA = 0.044715f;

// gelu(v) = v·σ(2u). For very negative v, e^(−2u) overflows to inf and the result is −0, the right limit.
template <class Exp>
DS_HD inline float gelu_forward_element(float v, Exp exp) {
  const float u = kGeluC * (v + kGeluA * v * v * v);
  return v / (1.0f + exp(-2.0f * u));
}

// dy·gelu'(v). gelu' = σ + v·(d(2u)/dv)·σ(1 − σ), σ = σ(2u). With t = e^(−2|u|) ∈ [0, 1] (never
// overflows): σ = 1/(1+t) for u ≥ 0, t/(1+t) for u < 0, and σ(1 − σ) = t/(1+t)² either way. Both
// sides of each select are computed first, so the selects compile to blends on the CPU. t = 0 once
// |u| is large (e^(−86.6) flushes to 0): the term is 0 there even where v·du2 has overflowed.
template <class Exp>
DS_HD inline float gelu_backward_element(float v, float dy, Exp exp) {
  const float u = kGeluC * (v + kGeluA * v * v * v);
  const float du2 = 2.0f * kGeluC * (1.0f + 3.0f * kGeluA * v * v);  // d(2u)/dv
  const float t = exp(-2.0f * fabsf(u));
  const float d = 1.0f / (1.0f + t);
  const float td = t * d;
  const float s = u >= 0.0f ? d : td;  // NaN u: NaN t, so s is NaN
  const float term = v * du2 * td * d;
  const float k = t > 0.0f ? term : 0.0f;
  return dy * (s + k);
}

}  // namespace ds::cpu
