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

  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    const size_t n = check_step_args("Lamb", segments, exp_avg_.size(), step);
    std::vector<TensorRange> whole{{0, n}};
    const std::vector<TensorView> views = locate(segments, tensors.empty() ? whole : tensors);

    const float beta1 = static_cast<float>(params_.beta1), beta2 = static_cast<float>(params_.beta2);
    const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
    std::vector<double> sums(2 * views.size(), 0.0);  // per tensor: Σp², Σu²
    for (size_t t = 0; t < views.size(); ++t) {
      const TensorView& x = views[t];
      for (size_t i = 0; i < x.size; ++i) {
        x.m[i] = beta1 * x.m[i] + one_minus_beta1 * x.g[i];
        x.v[i] = beta2 * x.v[i] + one_minus_beta2 * x.g[i] * x.g[i];
        const float u = update(x.p[i], x.m[i], x.v[i]);
        sums[2 * t] += static_cast<double>(x.p[i]) * x.p[i];
        sums[2 * t + 1] += static_cast<double>(u) * u;
      }
    }
    if (reduce_) reduce_(sums);

    const float step_size = params_.bias_correction ? static_cast<float>(lr) *
                                                          std::sqrt(bias_correction(beta2, step)) /
                                                          bias_correction(beta1, step)
                                                    : static_cast<float>(lr);
    for (size_t t = 0; t < views.size(); ++t) {
      const TensorView& x = views[t];
      const float scale = step_size * trust_ratio(sums[2 * t], sums[2 * t + 1]);
      for (size_t i = 0; i < x.size; ++i) x.p[i] -= scale * update(x.p[i], x.m[i], x.v[i]);
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
  struct TensorView {  // one tensor's elements and state
    float* p;
    const float* g;
    float *m, *v;
    size_t size;
  };

  // Pointers to each tensor's elements; throws std::invalid_argument for a range outside [0, n) or
  // across a segment boundary.
  std::vector<TensorView> locate(std::span<const Segment> segments, const std::vector<TensorRange>& ranges) {
    std::vector<TensorView> views;
    for (const TensorRange& t : ranges) {
      if (t.size == 0) {  // a tensor outside this rank's partition
        views.push_back({nullptr, nullptr, nullptr, nullptr, 0});
        continue;
      }
      size_t start = 0;  // of the segment, among the n elements
      const Segment* home = nullptr;
      for (const Segment& s : segments) {
        if (t.offset >= start && t.offset - start <= s.size && t.size <= s.size - (t.offset - start)) {
          home = &s;
          break;
        }
        start += s.size;
      }
      if (!home)
        throw std::invalid_argument(fmt::format("Lamb: tensor [{}, +{}) is not inside one segment", t.offset, t.size));
      const size_t within = t.offset - start;
      views.push_back({home->params + within, home->grads + within, exp_avg_.data() + t.offset,
                       exp_avg_sq_.data() + t.offset, t.size});
    }
    return views;
  }

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
