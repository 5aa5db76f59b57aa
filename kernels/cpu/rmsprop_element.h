// One element of RMSprop (torch.optim.RMSprop's update, which DeepSpeed runs for "RMSprop"), in fp32, each
// operation in the order torch's single-tensor loop does it. The CPU loops (rmsprop.cpp) call this body,
// without fused multiply-adds (-ffp-contract=off), and so does the GPU's kernel (kernels/cuda/one_state.cuh).
//   d ← g + wd·p (where wd ≠ 0);  s ← α·s + (1−α)·d²
//   centered: a ← lerp(a, d, 1−α);  v ← √(s − a²) + eps     else  v ← √s + eps
//   momentum μ > 0: b ← μ·b + d/v;  p ← p − lr·b            else  p ← p − lr·d/v
// s, a and b start at 0 on the first step.
#pragma once
#include <cmath>

#include "simt/hd.h"

namespace ds::cpu {

struct RmspropArgs {
  float lr;
  float alpha;            // the squares' (and centered: the gradients') decay
  float one_minus_alpha;  // 1 − alpha, rounded once, as torch passes it to addcmul and lerp
  float eps;
  float weight_decay;     // L2: added to the gradient
  float momentum;         // 0: no momentum buffer
  bool centered;          // subtract the square of the gradients' running mean
  bool first;             // the first step: the state starts at 0, whatever the buffers hold
};

// torch's lerp(from, to, w): from + w·(to − from) for |w| < 0.5, else to − (to − from)·(1 − w).
DS_HD inline float torch_lerp(float from, float to, float w) {
  return fabsf(w) < 0.5f ? from + w * (to - from) : to - (to - from) * (1.0f - w);
}

// grad_avg and buf are read and written only where the arguments say (centered; momentum > 0).
DS_HD inline void rmsprop_element(float& param, float grad, float& square_avg, float& grad_avg, float& buf,
                                  const RmspropArgs& a) {
  const float d = a.weight_decay != 0.0f ? grad + a.weight_decay * param : grad;
  square_avg = (a.first ? 0.0f : square_avg) * a.alpha + a.one_minus_alpha * d * d;
  float v;
  if (a.centered) {
    grad_avg = torch_lerp(a.first ? 0.0f : grad_avg, d, a.one_minus_alpha);
    v = sqrtf(square_avg - grad_avg * grad_avg) + a.eps;
  } else {
    v = sqrtf(square_avg) + a.eps;
  }
  if (a.momentum > 0.0f) {
    buf = (a.first ? 0.0f : buf) * a.momentum + d / v;
    param = param - a.lr * buf;
  } else {
    param = param - a.lr * d / v;
  }
}

}  // namespace ds::cpu
