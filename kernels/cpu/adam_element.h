// One element of the Adam/AdamW update (the formulas: adam.h), in fp32. The CPU loop (adam.cpp) and
// the CUDA kernel (kernels/cuda/adam.cuh) both call this body; neither fuses a multiply-add (adam.cpp
// is built with -ffp-contract=off, ds_kernels_cuda with --fmad=false), and sqrtf and the division are
// IEEE on both, so a GPU step gives the CPU's bits.
#pragma once
#include <math.h>

#include "simt/hd.h"

namespace ds::cpu {

struct AdamArgs {
  float beta1, beta2, eps, wd;
  float step_size;  // −lr / bc1
  float bc2_rsqrt;  // 1 / sqrt(bc2)
  float decay;      // AdamW: −lr·wd
};

// param, m and v updated in place from grad.
template <bool kDecoupled>
DS_HD inline void adam_element(float& param, float grad, float& m, float& v, const AdamArgs& a) {
  if constexpr (!kDecoupled) grad += a.wd * param;
  m = a.beta1 * m + (1.0f - a.beta1) * grad;
  v = a.beta2 * v + (1.0f - a.beta2) * grad * grad;
  const float denom = sqrtf(v) * a.bc2_rsqrt + a.eps;
  if constexpr (kDecoupled) param += a.decay * param;
  param = param + a.step_size * (m / denom);
}

}  // namespace ds::cpu
