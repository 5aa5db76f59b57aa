// One element of Adagrad (torch.optim.Adagrad's update, which DeepSpeed runs for "Adagrad" without offload), in
// fp32. The CPU loops (adagrad.cpp) call this body, without fused multiply-adds (-ffp-contract=off).
//   d ← g + wd·p;  s ← s + d²  (s starts at initial_accumulator_value);  p ← p − clr·d / (√s + eps)
// with clr = lr / (1 + (step − 1)·lr_decay). DeepSpeedCPUAdagrad (DeepSpeed's, with offload_optimizer) divides the
// raw gradient g instead of d (QUIRK; the same where weight_decay is 0) and has no lr_decay.
#pragma once
#include <cmath>

#include "simt/hd.h"

namespace ds::cpu {

struct AdagradArgs {
  float clr;            // this step's learning rate, lr / (1 + (step − 1)·lr_decay), rounded once
  float weight_decay;   // L2: added to the gradient
  float eps;
  float initial;        // initial_accumulator_value: the sum's value before the first step
  bool first;           // the first step: the sum starts at `initial`, whatever the buffer holds
};

DS_HD inline void adagrad_element(float& param, float grad, float& sum, const AdagradArgs& a) {
  const float d = grad + a.weight_decay * param;
  sum = (a.first ? a.initial : sum) + d * d;
  param = param - a.clr * (d / (sqrtf(sum) + a.eps));
}

}  // namespace ds::cpu
