// One element of LAMB (the formulas: sgd_lamb.h), in fp32: the moments' update and the update direction
// u. The CPU loops (sgd_lamb.cpp) and the CUDA kernels (kernels/cuda/lamb.cuh) both call these bodies;
// neither fuses a multiply-add (-ffp-contract=off, --fmad=false) and sqrtf and the division are IEEE on
// both, so a GPU gives the CPU's moments and directions bit for bit.
#pragma once
#include <math.h>

#include "simt/hd.h"

namespace ds::cpu {

struct LambArgs {
  float beta1, beta2, eps, weight_decay;
  bool eps_inside_sqrt;
};

// m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g².
DS_HD inline void lamb_moments_element(float grad, float& m, float& v, const LambArgs& a) {
  m = a.beta1 * m + (1.0f - a.beta1) * grad;
  v = a.beta2 * v + (1.0f - a.beta2) * grad * grad;
}

// u = m / (sqrt(v) + eps) + wd·p, or m / sqrt(v + eps) + wd·p with eps_inside_sqrt.
DS_HD inline float lamb_update(float p, float m, float v, const LambArgs& a) {
  const float denom = a.eps_inside_sqrt ? sqrtf(v + a.eps) : sqrtf(v) + a.eps;
  return m / denom + a.weight_decay * p;
}

}  // namespace ds::cpu
