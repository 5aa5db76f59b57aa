// Adam / AdamW (the formulas and the fused loop: kernels/cpu/adam.h). The optimizer holds the moments
// and runs the kernel over each segment, with the segment's gradient scale and parameter copy.
#include <cmath>

#include "cpu/adam.h"
#include "optim/elementwise.h"
#include "optim/optimizers.h"

namespace ds::optim {
namespace {

// State: exp_avg (m), exp_avg_sq (v).
class Adam final : public ElementwiseOptimizer {
 public:
  Adam(const AdamParams& params, size_t n, amp::Storage state)
      : ElementwiseOptimizer("Adam", n, state, {"exp_avg", "exp_avg_sq"}, true), params_(params) {}

  std::optional<DeviceUpdate> device_update(double lr, int64_t step) const override {
    if (state_storage() != amp::Storage::F32) return std::nullopt;
    DeviceUpdate u;
    u.kind = params_.adam_w_mode ? DeviceUpdate::Kind::adamw : DeviceUpdate::Kind::adam;
    u.adam = adam_args(params_, lr, step);
    return u;
  }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

 private:
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr,
              int64_t step) const override {
    const cpu::AdamArgs args = adam_args(params_, lr, step);
    const size_t state_bytes = amp::storage_bytes(state[0].storage);
    size_t k = 0;  // state offset of the segment
    for (const Segment& s : segments) {
      cpu::AdamArrays arrays{s.params, s.grads, static_cast<std::byte*>(state[0].data) + k * state_bytes,
                             static_cast<std::byte*>(state[1].data) + k * state_bytes, s.size};
      arrays.param_type = s.param_type;
      arrays.grad_type = s.grad_type;
      arrays.state_type = state[0].storage;
      arrays.grad_scale = s.grad_scale;
      arrays.param_copy = s.param_copy;
      arrays.copy_type = s.copy_type;
      cpu::adam_step(arrays, args, params_.adam_w_mode);
      k += s.size;
    }
  }

  AdamParams params_;
};

}  // namespace

cpu::AdamArgs adam_args(const AdamParams& params, double lr, int64_t step) {
  const float beta1 = static_cast<float>(params.beta1), beta2 = static_cast<float>(params.beta2);
  const float lr_f = static_cast<float>(lr), wd = static_cast<float>(params.weight_decay);
  const float bc1 = params.bias_correction ? bias_correction(beta1, step) : 1.0f;
  const float bc2 = params.bias_correction ? bias_correction(beta2, step) : 1.0f;
  return {beta1, beta2, static_cast<float>(params.eps), wd, -lr_f / bc1, 1.0f / std::sqrt(bc2), -lr_f * wd};
}

std::unique_ptr<Optimizer> make_adam(const AdamParams& params, size_t n, amp::Storage state) {
  return std::make_unique<Adam>(params, n, state);
}

}  // namespace ds::optim
