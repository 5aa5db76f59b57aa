// What DeepSpeed's three 1-bit optimizers share (fp16/onebit/*.py): fp32 moment updates written as
// torch's in-place ops (β as fp32, 1−β computed in double then rounded, as a Python scalar), the
// Adam direction without bias correction, and the warm-up length.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "config/ds_config.h"

namespace ds::optim {

struct OneBitArgs {
  explicit OneBitArgs(const CompressedCommParams& p)
      : beta1(static_cast<float>(p.beta1)),
        one_minus_beta1(static_cast<float>(1.0 - p.beta1)),
        beta2(static_cast<float>(p.beta2)),
        one_minus_beta2(static_cast<float>(1.0 - p.beta2)),
        eps(static_cast<float>(p.eps)),
        wd(static_cast<float>(p.weight_decay)) {}
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, wd;

  float momentum(float m, float g) const { return beta1 * m + one_minus_beta1 * g; }         // exp_avg
  float variance(float v, float g) const { return beta2 * v + one_minus_beta2 * g * g; }      // exp_avg_sq
  float denominator(float v) const { return std::sqrt(v) + eps; }
  // m / (√v + eps), plus wd·p when weight decay is on (DeepSpeed adds it only then).
  float direction(float m, float v, float p) const {
    const float u = m / denominator(v);
    return wd > 0.0f ? u + wd * p : u;
  }
};

// The last step of the warm-up (uncompressed, the engine averaging gradients) for a freeze step F:
// DeepSpeed's first step only sets up and checks F from the second step on, so F < 2 acts as 2.
inline int64_t last_warmup_step(int64_t freeze_step) { return std::max<int64_t>(freeze_step, 2); }

}  // namespace ds::optim
