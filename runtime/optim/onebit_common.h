// What DeepSpeed's three 1-bit optimizers share (fp16/onebit/*.py): fp32 moment updates written as
// torch's in-place ops (β as fp32, 1−β computed in double then rounded, as a Python scalar), the
// Adam direction without bias correction, the warm-up length, and compressing tensor by tensor.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "comm/compressed_allreduce.h"
#include "config/ds_config.h"
#include "optim/tensor_views.h"

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

// Each tensor's slice of `buffer` ([n], indexed like the state) through one compressed all-reduce,
// in place, with per-tensor errors (`compressor` is made on first use).
inline void compress_tensors(std::optional<CompressedAllreduce>& compressor, ProcessGroup& group,
                             std::vector<float>& buffer, const std::vector<TensorView>& views) {
  std::vector<float*> buffers;
  std::vector<size_t> sizes;
  for (const TensorView& t : views) {
    buffers.push_back(buffer.data() + t.offset);
    sizes.push_back(t.size);
  }
  if (!compressor) compressor.emplace(group, sizes);
  compressor->run(buffers);
}

// p ← p − lr·u for every tensor, u the direction of the moments m and v ([n] each, indexed like the
// state); −lr·u is also added into `acc` ([n]) when given (0/1 Adam's local steps).
inline void apply_direction(const std::vector<TensorView>& views, const std::vector<float>& m,
                            const std::vector<float>& v, const OneBitArgs& a, float lr, float* acc = nullptr) {
  for (const TensorView& t : views)
    for (size_t i = 0; i < t.size; ++i) {
      const float step = -lr * a.direction(m[t.offset + i], v[t.offset + i], t.params[i]);
      t.params[i] += step;
      if (acc) acc[t.offset + i] += step;
    }
}

}  // namespace ds::optim
