// Lion as DeepSpeed's FusedLion / DeepSpeedCPULion (the formulas and the loop: kernels/cpu/lion.h): one
// momentum buffer ("exp_avg", as DeepSpeed names it), no bias correction, decoupled weight decay. Parameters,
// gradients and the momentum may each be fp32 or bf16.
#include "cpu/lion.h"
#include "optim/optimizers.h"
#include "optim/elementwise.h"

namespace ds::optim {
namespace {

// State: exp_avg (the momentum).
class Lion final : public ElementwiseOptimizer {
 public:
  Lion(const LionParams& params, size_t n, amp::Storage state)
      : ElementwiseOptimizer("Lion", n, state, {"exp_avg"}), params_(params) {}

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

  std::optional<DeviceUpdate> device_update(double lr, int64_t) const override {
    if (state_storage() != amp::Storage::F32) return std::nullopt;
    DeviceUpdate u;
    u.kind = DeviceUpdate::Kind::lion;
    u.lion = lion_args(params_, lr);
    return u;
  }

 private:
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr,
              int64_t) const override {
    const cpu::LionArgs args = lion_args(params_, lr);
    each_segment(segments, state, [&](const Segment& s, std::span<std::byte* const> m) {
      cpu::lion_step(s.params, s.param_type, s.grads, s.grad_type, m[0], state[0].storage, s.size, args);
    });
  }

  LionParams params_;
};

}  // namespace

cpu::LionArgs lion_args(const LionParams& params, double lr) {
  const auto f = [](double x) { return static_cast<float>(x); };
  const float beta1 = f(params.beta1), beta2 = f(params.beta2), rate = f(lr);
  return {rate, 1.0f - rate * f(params.weight_decay), beta1, 1.0f - beta1, beta2, 1.0f - beta2};
}

std::unique_ptr<Optimizer> make_lion(const LionParams& params, size_t n, amp::Storage state) {
  return std::make_unique<Lion>(params, n, state);
}

}  // namespace ds::optim
