// LAMB as DeepSpeed's FusedLamb kernel (the formulas and the loops: kernels/cpu/sgd_lamb.h), per tensor:
// the moments and the tensor's Σp², Σu² (optionally summed across ranks), then the update scaled by the
// step size, lr·sqrt(1−β2^t)/(1−β1^t) in fp32 or lr without bias correction, times the trust ratio
// ‖p‖/‖u‖ clamped to [min_coeff, max_coeff] (1 if either norm is 0). Parameters, gradients and moments may
// each be fp32 or bf16.
#include <algorithm>
#include <cmath>

#include "cpu/sgd_lamb.h"
#include "optim/state_buffer.h"
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
    const cpu::LambArgs args = lamb_args(params_);
    for (size_t t = 0; t < places.size(); ++t) {
      if (places[t].size == 0) continue;
      const cpu::LambSums s = cpu::lamb_moments(arrays(places[t]), args);
      sums[2 * t] = s.p_sq;
      sums[2 * t + 1] = s.u_sq;
    }
    if (reduce_) reduce_(sums);

    const float step_size = lamb_step_size(params_, lr, step);
    for (size_t t = 0; t < places.size(); ++t)
      if (places[t].size > 0)
        cpu::lamb_apply(arrays(places[t]), args, step_size * lamb_trust_ratio(params_, sums[2 * t], sums[2 * t + 1]));
  }

  void hold_state(bool held) override {
    exp_avg_.hold(held);
    exp_avg_sq_.hold(held);
  }
  std::vector<StateView> state() override { return {exp_avg_.view("exp_avg"), exp_avg_sq_.view("exp_avg_sq")}; }

  std::optional<DeviceUpdate> device_update(double lr, int64_t step) const override {
    if (exp_avg_.storage() != amp::Storage::F32) return std::nullopt;
    DeviceUpdate u;
    u.kind = DeviceUpdate::Kind::lamb;
    u.lamb = lamb_args(params_);
    u.lamb_step_size = lamb_step_size(params_, lr, step);
    u.trust_ratio = [params = params_](double p_sq, double u_sq) { return lamb_trust_ratio(params, p_sq, u_sq); };
    u.reduce_sums = reduce_;
    return u;
  }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

 private:
  // The tensor's parameters, gradients and moments.
  cpu::LambArrays arrays(const TensorPlace& t) {
    const Segment& s = *t.segment;
    const size_t state_bytes = amp::storage_bytes(exp_avg_.storage());
    cpu::LambArrays a{static_cast<std::byte*>(s.params) + t.within * amp::storage_bytes(s.param_type),
                      static_cast<const std::byte*>(s.grads) + t.within * amp::storage_bytes(s.grad_type),
                      exp_avg_.as<std::byte>() + t.offset * state_bytes, exp_avg_sq_.as<std::byte>() + t.offset * state_bytes,
                      t.size};
    check_not_fp16(s.param_type, s.grad_type);
    a.param_type = s.param_type;
    a.grad_type = s.grad_type;
    a.state_type = exp_avg_.storage();
    return a;
  }

  LambParams params_;
  NormReducer reduce_;
  StateBuffer exp_avg_;     // m [n]
  StateBuffer exp_avg_sq_;  // v [n]
};

}  // namespace

cpu::LambArgs lamb_args(const LambParams& params) {
  return {static_cast<float>(params.beta1), static_cast<float>(params.beta2), static_cast<float>(params.eps),
          static_cast<float>(params.weight_decay), params.eps_inside_sqrt};
}

float lamb_step_size(const LambParams& params, double lr, int64_t step) {
  const auto beta1 = static_cast<float>(params.beta1), beta2 = static_cast<float>(params.beta2);
  return params.bias_correction
             ? static_cast<float>(lr) * std::sqrt(bias_correction(beta2, step)) / bias_correction(beta1, step)
             : static_cast<float>(lr);
}

float lamb_trust_ratio(const LambParams& params, double p_sq, double u_sq) {
  const double p_norm = std::sqrt(p_sq), u_norm = std::sqrt(u_sq);
  if (p_norm == 0.0 || u_norm == 0.0) return 1.0f;
  return static_cast<float>(std::clamp(p_norm / u_norm, params.min_coeff, params.max_coeff));
}

std::unique_ptr<Optimizer> make_lamb(const LambParams& params, size_t n, NormReducer reduce_norms, amp::Storage state) {
  return std::make_unique<Lamb>(params, n, std::move(reduce_norms), state);
}

}  // namespace ds::optim
