// LAMB as DeepSpeed's FusedLamb kernel (csrc/lamb/fused_lamb_cuda_kernel.cu), per tensor, fp32:
//   m ← β1·m + (1−β1)·g            v ← β2·v + (1−β2)·g²
//   u = m / (sqrt(v) + eps) + wd·p   (sqrt(v + eps) with eps_inside_sqrt; m, v not bias-corrected)
//   r = ‖p‖₂ / ‖u‖₂ clamped to [min_coeff, max_coeff]; r = 1 if either norm is 0
//   p ← p − step_size·r·u,  step_size = lr·sqrt(1−β2^t)/(1−β1^t) in fp32, or lr without bias correction
// The norms are accumulated in double (fixed order), then optionally summed across ranks.
// Parameters, gradients and moments may each be fp32 or bf16 (elements.h).
#include <algorithm>
#include <cmath>


#include "optim/elements.h"
#include "optim/optimizers.h"
#include "optim/tensor_views.h"

namespace ds::optim {
namespace {

class Lamb final : public Optimizer {
 public:
  Lamb(const LambParams& params, size_t n, NormReducer reduce, amp::Storage state)
      : params_(params), reduce_(std::move(reduce)), exp_avg_(n, state), exp_avg_sq_(n, state) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    const size_t n = check_step_args("Lamb", segments, exp_avg_.size(), step);
    const std::vector<TensorPlace> places = place_tensors("Lamb", segments, tensors, n);
    std::vector<double> sums(2 * places.size(), 0.0);  // per tensor: Σp², Σu²
    for (size_t t = 0; t < places.size(); ++t)
      on_elements(places[t], [&]<class P, class G, class S>(P* p, const G* g, S* m, S* v) {
        moments(p, g, m, v, places[t].size, sums[2 * t], sums[2 * t + 1]);
      });
    if (reduce_) reduce_(sums);

    const float beta1 = static_cast<float>(params_.beta1), beta2 = static_cast<float>(params_.beta2);
    const float step_size = params_.bias_correction ? static_cast<float>(lr) *
                                                          std::sqrt(bias_correction(beta2, step)) /
                                                          bias_correction(beta1, step)
                                                    : static_cast<float>(lr);
    for (size_t t = 0; t < places.size(); ++t) {
      const float scale = step_size * trust_ratio(sums[2 * t], sums[2 * t + 1]);
      on_elements(places[t], [&]<class P, class G, class S>(P* p, const G*, S* m, S* v) {
        for (size_t i = 0; i < places[t].size; ++i) {
          const float param = load(p[i]);
          store(p[i], param - scale * update(param, load(m[i]), load(v[i])));
        }
      });
    }
  }

  std::vector<StateView> state() override { return {exp_avg_.view("exp_avg"), exp_avg_sq_.view("exp_avg_sq")}; }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

 private:
  // f(p, g, m, v) with the tensor's typed parameters, gradients and moments; nothing for an empty one.
  template <class F>
  void on_elements(const TensorPlace& t, F&& f) {
    if (t.size == 0) return;
    with_elements(t.segment->param_type, t.segment->grad_type, [&]<class P, class G>(P*, G*) {
      with_element(exp_avg_.storage(), [&]<class S>(S*) {
        f(static_cast<P*>(t.segment->params) + t.within, static_cast<const G*>(t.segment->grads) + t.within,
          exp_avg_.as<S>() + t.offset, exp_avg_sq_.as<S>() + t.offset);
      });
    });
  }

  // The moments' update, and Σp², Σu² added into p_sq, u_sq (u from the stored m and v, as the
  // second pass recomputes it: identical bits).
  template <class P, class G, class S>
  void moments(const P* p, const G* g, S* m, S* v, size_t n, double& p_sq, double& u_sq) const {
    const float beta1 = static_cast<float>(params_.beta1), beta2 = static_cast<float>(params_.beta2);
    const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
    for (size_t i = 0; i < n; ++i) {
      const float grad = load(g[i]);
      store(m[i], beta1 * load(m[i]) + one_minus_beta1 * grad);
      store(v[i], beta2 * load(v[i]) + one_minus_beta2 * grad * grad);
      const float param = load(p[i]);
      const float u = update(param, load(m[i]), load(v[i]));
      p_sq += static_cast<double>(param) * param;
      u_sq += static_cast<double>(u) * u;
    }
  }

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
  StateBuffer exp_avg_;     // m [n]
  StateBuffer exp_avg_sq_;  // v [n]
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(const LambParams& params, size_t n, NormReducer reduce_norms, amp::Storage state) {
  return std::make_unique<Lamb>(params, n, std::move(reduce_norms), state);
}

}  // namespace ds::optim
