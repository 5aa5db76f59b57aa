// 1-bit LAMB as DeepSpeed's OnebitLamb (fp16/onebit/lamb.py), per element in fp32, no bias
// correction, one trust ratio per tensor. Step 1 changes nothing (DeepSpeed's set-up step).
//   warm-up, steps 2 … W, W = max(freeze_step, 2), on the engine's averaged gradient g:
//     m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  at step W: v_fresh ← v
//     u = m/(√v + eps) + wd·p;  c = clamp(‖p‖/‖u‖, min_coeff, max_coeff), or 1 if either norm is 0
//     p ← p − lr·c·u;  if c ≠ 1: frozen ← coeff_beta·frozen + (1−coeff_beta)·c
//   compression, from W+1 (v frozen, no engine all-reduce, g this rank's own):
//     at its first step, per tensor k: scale_k = mean_j(rms(m_j)) / rms(m_k)  (1 if rms(m_k) is 0)
//     m_last = m;  m ← (β1·m + (1−β1)·g)·scale_k;  m ← compressed_allreduce(m) over all tensors at
//     once;  m ← m/scale_k;  g̃ = (m − β1·m_last)/(1−β1);  v_fresh ← β2·v_fresh + (1−β2)·g̃²
//     u_pre = m/(√v + eps);  u = u_pre + wd·p;  f = max((√v + eps)/(√v_fresh + eps))
//     if wd > 0: r = min(1, ‖u_pre‖/‖u‖), f ← f·r + 1 − r
//     f clamped to [factor_min, factor_max], then to last·(1 ± factor_threshold);  last ← f
//     p ← p − lr·frozen·f·u
// Norms are summed in double. Checkpoints hold m, v, v_fresh and per tensor frozen, last and scale;
// a load zeroes the errors. Differences from DeepSpeed: a load keeps frozen and last in the warm-up
// too (DeepSpeed resets them to 0 and 1 there, so its frozen ratio forgets the steps before the
// load) and does not repeat the set-up step; v_fresh is taken at step W even for freeze_step < 2
// (DeepSpeed never takes it then); a zero momentum gets scale 1 (DeepSpeed divides by zero); the
// fused momentum's padding is zero at every step (DeepSpeed's keeps the previous step's output).
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "comm/compressed_allreduce.h"
#include "optim/onebit_common.h"
#include "optim/optimizers.h"
#include "optim/tensor_views.h"

namespace ds::optim {
namespace {

double norm(const float* x, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return std::sqrt(sum);
}

// The largest element (all positive here), in 8 lanes so that the loop vectorises; max is exact in
// any order.
float max_of(const std::vector<float>& x) {
  float lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8)
    for (size_t k = 0; k < 8; ++k) lanes[k] = std::max(lanes[k], x[i + k]);
  for (; i < x.size(); ++i) lanes[0] = std::max(lanes[0], x[i]);
  return *std::max_element(lanes, lanes + 8);
}

// One tensor's compressed-stage elements after the all-reduce: m ← m/scale, the reconstructed gradient
// into v_fresh, u_pre = m/(√v + eps), u = u_pre (+ wd·p), ratio = (√v + eps)/(√v_fresh + eps). Distinct
// arrays, so that the loop vectorises.
void compressed_elements(float* __restrict m, const float* __restrict m_last, const float* __restrict v,
                         float* __restrict fresh, const float* __restrict p, float* __restrict u_pre,
                         float* __restrict u, float* __restrict ratio, size_t n, float scale, const OneBitArgs a) {
  for (size_t i = 0; i < n; ++i) {
    const float mi = m[i] / scale;
    m[i] = mi;
    const float g = (mi - m_last[i] * a.beta1) / a.one_minus_beta1;
    const float f = a.variance(fresh[i], g);
    fresh[i] = f;
    const float denom = a.denominator(v[i]);
    u_pre[i] = mi / denom;
    u[i] = a.wd > 0.0f ? u_pre[i] + a.wd * p[i] : u_pre[i];
    ratio[i] = denom / a.denominator(f);
  }
}

class OneBitLamb final : public Optimizer {
 public:
  OneBitLamb(const OneBitLambParams& params, size_t n, ProcessGroup& group)
      : params_(params), group_(group), exp_avg_(n, 0.0f), exp_avg_sq_(n, 0.0f), exp_avg_sq_fresh_(n, 0.0f) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    const size_t n = check_step_args("OneBitLamb", segments, exp_avg_.size(), step);
    const std::vector<TensorView> views = locate_tensors("OneBitLamb", segments, tensors, n);
    if (frozen_.empty()) {
      frozen_.assign(views.size(), 0.0);
      last_factor_.assign(views.size(), 1.0);
    }
    if (frozen_.size() != views.size() || last_factor_.size() != views.size() ||
        (!scale_.empty() && scale_.size() != views.size()))
      throw std::invalid_argument(fmt::format("OneBitLamb: {} tensors, but its per-tensor state has {}", views.size(),
                                              frozen_.size()));
    if (step == 1) return;
    if (wants_averaged_gradients(step))
      warmup(views, static_cast<float>(lr), step);
    else
      compressed(views, static_cast<float>(lr));
  }

  bool wants_averaged_gradients(int64_t step) const override { return step <= last_warmup_step(params_.freeze_step); }

  std::vector<StateView> state() override {
    return {f32_state("exp_avg", exp_avg_), f32_state("exp_avg_sq", exp_avg_sq_),
            f32_state("exp_avg_sq_fresh", exp_avg_sq_fresh_)};
  }

  std::vector<std::pair<std::string, std::vector<double>*>> scalar_state() override {
    return {{"lamb_coeff_freeze", &frozen_}, {"last_factor", &last_factor_}, {"scaling_coeff", &scale_}};
  }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

  void restored() override {
    if (compressor_) compressor_->reset_errors();
  }

  size_t extra_bytes() const override {
    return m_last_.size() * sizeof(float) + (compressor_ ? compressor_->bytes() : 0);
  }

 private:
  void warmup(const std::vector<TensorView>& views, float lr, int64_t step) {
    const OneBitArgs a(params_);
    const bool capture = step == last_warmup_step(params_.freeze_step);
    std::vector<float> u;
    for (size_t k = 0; k < views.size(); ++k) {
      const TensorView& t = views[k];
      float* m = exp_avg_.data() + t.offset;
      float* v = exp_avg_sq_.data() + t.offset;
      u.resize(t.size);
      for (size_t i = 0; i < t.size; ++i) {
        m[i] = a.momentum(m[i], t.grads[i]);
        v[i] = a.variance(v[i], t.grads[i]);
        u[i] = a.direction(m[i], v[i], t.params[i]);
      }
      if (capture) std::copy_n(v, t.size, exp_avg_sq_fresh_.data() + t.offset);
      const double p_norm = norm(t.params, t.size), u_norm = norm(u.data(), t.size);
      double coeff = 1.0;
      if (p_norm != 0.0 && u_norm != 0.0)
        coeff = std::clamp(static_cast<double>(static_cast<float>(p_norm / u_norm)), params_.min_coeff, params_.max_coeff);
      if (coeff != 1.0) frozen_[k] = params_.coeff_beta * frozen_[k] + (1.0 - params_.coeff_beta) * coeff;
      const float step_size = lr * static_cast<float>(coeff);
      for (size_t i = 0; i < t.size; ++i) t.params[i] -= step_size * u[i];
    }
  }

  void compressed(const std::vector<TensorView>& views, float lr) {
    const OneBitArgs a(params_);
    if (scale_.empty()) scale_ = momentum_scales(views);
    m_last_.assign(exp_avg_.begin(), exp_avg_.end());
    for (size_t k = 0; k < views.size(); ++k) {
      const TensorView& t = views[k];
      const float scale = static_cast<float>(scale_[k]);
      float* m = exp_avg_.data() + t.offset;
      for (size_t i = 0; i < t.size; ++i) m[i] = a.momentum(m[i], t.grads[i]) * scale;
    }
    if (group_.size() > 1) {  // one fused buffer: the state holds every tensor's m back to back
      if (!compressor_) compressor_.emplace(group_, std::vector<size_t>{exp_avg_.size()});
      float* fused = exp_avg_.data();
      compressor_->run(std::span<float* const>(&fused, 1));
    }
    std::vector<float> u_pre, u, ratio;
    for (size_t k = 0; k < views.size(); ++k) {
      const TensorView& t = views[k];
      const float scale = static_cast<float>(scale_[k]);
      float* m = exp_avg_.data() + t.offset;
      const float* m_last = m_last_.data() + t.offset;
      const float* v = exp_avg_sq_.data() + t.offset;
      float* fresh = exp_avg_sq_fresh_.data() + t.offset;
      u_pre.resize(t.size);
      u.resize(t.size);
      ratio.resize(t.size);
      compressed_elements(m, m_last, v, fresh, t.params, u_pre.data(), u.data(), ratio.data(), t.size, scale, a);
      double f = max_of(ratio);
      if (a.wd > 0.0f) {
        const double ratio = std::min(1.0, norm(u_pre.data(), t.size) / norm(u.data(), t.size));
        f = f * ratio + (1.0 - ratio);
      }
      f = std::clamp(f, params_.factor_min, params_.factor_max);
      f = std::clamp(f, last_factor_[k] * (1.0 - params_.factor_threshold), last_factor_[k] * (1.0 + params_.factor_threshold));
      last_factor_[k] = f;
      const float step_size = lr * static_cast<float>(frozen_[k] * f);
      for (size_t i = 0; i < t.size; ++i) t.params[i] -= step_size * u[i];
    }
  }

  // DeepSpeed's scaling_coeff, from the momentum at the end of the warm-up.
  std::vector<double> momentum_scales(const std::vector<TensorView>& views) const {
    std::vector<double> rms;
    double mean = 0.0;
    for (const TensorView& t : views) {
      rms.push_back(norm(exp_avg_.data() + t.offset, t.size) / std::sqrt(static_cast<double>(t.size)));
      mean += rms.back() / static_cast<double>(views.size());
    }
    for (double& r : rms) r = r > 0.0 ? mean / r : 1.0;
    return rms;
  }

  OneBitLambParams params_;
  ProcessGroup& group_;
  std::vector<float> exp_avg_;           // m, n floats
  std::vector<float> exp_avg_sq_;        // v, n floats; frozen after the warm-up
  std::vector<float> exp_avg_sq_fresh_;  // v_fresh, n floats: v of the reconstructed gradients
  std::vector<float> m_last_;            // n floats: m before this compressed step
  std::vector<double> frozen_;           // per tensor: lamb_coeff_freeze, the EMA of warm-up trust ratios
  std::vector<double> last_factor_;      // per tensor: the previous compression-stage factor
  std::vector<double> scale_;            // per tensor: scaling_coeff (empty until compression starts)
  std::optional<CompressedAllreduce> compressor_;  // the fused momentum's errors
};

}  // namespace

std::unique_ptr<Optimizer> make_onebit_lamb(const OneBitLambParams& params, size_t n, ProcessGroup& group) {
  return std::make_unique<OneBitLamb>(params, n, group);
}

}  // namespace ds::optim
