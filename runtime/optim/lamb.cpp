// LAMB as DeepSpeed's FusedLamb kernel (csrc/lamb/fused_lamb_cuda_kernel.cu), per tensor, fp32:
//   m ← β1·m + (1−β1)·g            v ← β2·v + (1−β2)·g²
//   u = m / (sqrt(v) + eps) + wd·p   (sqrt(v + eps) with eps_inside_sqrt; m, v not bias-corrected)
//   r = ‖p‖₂ / ‖u‖₂ clamped to [min_coeff, max_coeff]; r = 1 if either norm is 0
//   p ← p − step_size·r·u,  step_size = lr·sqrt(1−β2^t)/(1−β1^t) in fp32, or lr without bias correction
// The norms are accumulated in double (fixed order), then optionally summed across ranks.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "optim/optimizers.h"

namespace ds::optim {
namespace {

class Lamb final : public Optimizer {
 public:
  Lamb(const LambParams& params, size_t n, NormReducer reduce)
      : params_(params), reduce_(std::move(reduce)), exp_avg_(n, 0.0f), exp_avg_sq_(n, 0.0f) {}

  void step(float* params, const float* grads, size_t n, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    check_step_args("Lamb", n, exp_avg_.size(), step);
    std::vector<TensorRange> whole{{0, n}};
    const auto& ranges = tensors.empty() ? whole : tensors;
    for (const auto& t : ranges)
      if (t.offset > n || t.size > n - t.offset)
        throw std::invalid_argument(fmt::format("Lamb: tensor [{}, +{}) outside [0, {})", t.offset, t.size, n));

    const float beta1 = static_cast<float>(params_.beta1), beta2 = static_cast<float>(params_.beta2);
    const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
    float* m = exp_avg_.data();
    float* v = exp_avg_sq_.data();
    std::vector<double> sums(2 * ranges.size(), 0.0);  // per tensor: Σp², Σu²
    for (size_t t = 0; t < ranges.size(); ++t) {
      for (size_t i = ranges[t].offset; i < ranges[t].offset + ranges[t].size; ++i) {
        m[i] = beta1 * m[i] + one_minus_beta1 * grads[i];
        v[i] = beta2 * v[i] + one_minus_beta2 * grads[i] * grads[i];
        const float u = update(params[i], m[i], v[i]);
        sums[2 * t] += static_cast<double>(params[i]) * params[i];
        sums[2 * t + 1] += static_cast<double>(u) * u;
      }
    }
    if (reduce_) reduce_(sums);

    const float step_size = params_.bias_correction ? static_cast<float>(lr) *
                                                          std::sqrt(bias_correction(beta2, step)) /
                                                          bias_correction(beta1, step)
                                                    : static_cast<float>(lr);
    for (size_t t = 0; t < ranges.size(); ++t) {
      const float scale = step_size * trust_ratio(sums[2 * t], sums[2 * t + 1]);
      for (size_t i = ranges[t].offset; i < ranges[t].offset + ranges[t].size; ++i)
        params[i] -= scale * update(params[i], m[i], v[i]);
    }
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

 private:
  // u for one element (recomputed in the second pass from the same p, m, v: identical bits).
  float update(float p, float m, float v) const {
    const float eps = static_cast<float>(params_.eps);
    const float denom = params_.eps_inside_sqrt ? std::sqrt(v + eps) : std::sqrt(v) + eps;
    return m / denom + static_cast<float>(params_.weight_decay) * p;
  }

  float trust_ratio(double p_sq, double u_sq) const {
    const double p_norm = std::sqrt(p_sq), u_norm = std::sqrt(u_sq);
    if (p_norm == 0.0 || u_norm == 0.0) return 1.0f;
    return static_cast<float>(std::clamp(p_norm / u_norm, params_.min_coeff, params_.max_coeff));
  }

  LambParams params_;
  NormReducer reduce_;
  std::vector<float> exp_avg_;     // m, n floats
  std::vector<float> exp_avg_sq_;  // v, n floats
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(const LambParams& params, size_t n, NormReducer reduce_norms) {
  return std::make_unique<Lamb>(params, n, std::move(reduce_norms));
}

}  // namespace ds::optim
