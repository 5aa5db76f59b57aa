// One element of SGD (torch.optim.SGD's update; the formulas: sgd_lamb.h), in fp32. The CPU loops
// (sgd_lamb.cpp) and the CUDA kernel (kernels/cuda/sgd.cuh) both call this body; neither fuses a
// multiply-add (-ffp-contract=off, --fmad=false), so a GPU step gives the CPU's bits.
#pragma once
#include "simt/hd.h"

namespace ds::cpu {

struct SgdArgs {
  float lr, weight_decay, momentum;
  float keep;  // 1 − dampening (rounded once from the config's double)
  bool nesterov;
  bool first;  // the first step: the buffer starts as d
};

// d ← g + wd·p; with kMomentum: buf ← d on the first step (kFirst), else μ·buf + (1 − dampening)·d, and d ← d + μ·buf
// (kNesterov) or buf; p ← p − lr·d. Without kMomentum, buf is neither read nor written.
template <bool kMomentum, bool kNesterov, bool kFirst>
DS_HD inline void sgd_element(float& param, float grad, float& buf, const SgdArgs& a) {
  const float d = grad + a.weight_decay * param;
  if constexpr (!kMomentum) {
    param = param - a.lr * d;
  } else {
    const float b = kFirst ? d : a.momentum * buf + a.keep * d;
    buf = b;
    param = param - a.lr * (kNesterov ? d + a.momentum * b : b);
  }
}

}  // namespace ds::cpu
