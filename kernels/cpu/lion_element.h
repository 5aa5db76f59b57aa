// One element of Lion (DeepSpeed's FusedLion and DeepSpeedCPULion, after Chen et al., "Symbolic Discovery of
// Optimization Algorithms", 2023), in fp32. The CPU loops (lion.cpp) and the CUDA kernel
// (kernels/cuda/lion.cuh) both call this body; neither fuses a multiply-add (-ffp-contract=off,
// --fmad=false), so a GPU step gives the CPU's bits.
//   c ← β1·m + (1−β1)·g;  p ← p·(1 − lr·wd) − lr·sign(c);  m ← β2·m + (1−β2)·g
// sign(0) is 0, as the paper's and torch.sign: a parameter whose gradient and momentum are both 0 stays where
// it is. DeepSpeed's loops move it by lr there (QUIRK), and not alike: its CPU loop by −copysign(lr, c) (−lr at
// +0), its CUDA kernel by c > 0 ? −lr : lr (+lr at 0). A NaN in c makes the parameter NaN.
#pragma once
#include "simt/hd.h"

namespace ds::cpu {

struct LionArgs {
  float lr;
  float after_decay;                  // 1 − lr·wd, formed in fp32 as DeepSpeed forms it
  float beta1, one_minus_beta1;       // 1 − β1 in fp32, as DeepSpeed's loops
  float beta2, one_minus_beta2;
};

DS_HD inline void lion_element(float& param, float grad, float& m, const LionArgs& a) {
  const float c = m * a.beta1 + grad * a.one_minus_beta1;
  const float step = c > 0.0f ? a.lr : c < 0.0f ? -a.lr : c - c;  // lr·sign(c): 0 at ±0, NaN for NaN
  param = param * a.after_decay - step;
  m = m * a.beta2 + grad * a.one_minus_beta2;
}

}  // namespace ds::cpu
