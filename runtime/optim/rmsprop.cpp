// RMSprop as torch.optim.RMSprop, which DeepSpeed runs for "RMSprop" (the formulas and the loop:
// kernels/cpu/rmsprop.h). State, in torch's order and names: square_avg; momentum_buffer when momentum > 0;
// grad_avg when centered. torch creates them zeroed on its first step; here "first" is step == 1 (after a
// resume they come from the checkpoint). Parameters, gradients and the state may each be fp32 or bf16; plain
// RMSprop (no momentum, not centered) with fp32 state also steps on the GPU (device_update: the same element
// body in kernels/cuda/one_state.cuh).
#include "cpu/rmsprop.h"
#include "optim/optimizers.h"
#include "optim/elementwise.h"

namespace ds::optim {
namespace {

std::vector<std::string> state_names(const RmspropParams& params) {
  std::vector<std::string> names{"square_avg"};
  if (params.momentum > 0.0) names.push_back("momentum_buffer");
  if (params.centered) names.push_back("grad_avg");
  return names;
}

class Rmsprop final : public ElementwiseOptimizer {
 public:
  Rmsprop(const RmspropParams& params, size_t n, amp::Storage state)
      : ElementwiseOptimizer("RMSprop", n, state, state_names(params)), params_(params) {}

  std::optional<DeviceUpdate> device_update(double lr, int64_t step) const override {
    if (params_.momentum > 0.0 || params_.centered || state_storage() != amp::Storage::F32) return std::nullopt;
    DeviceUpdate u;
    u.kind = DeviceUpdate::Kind::rmsprop;
    u.rmsprop = rmsprop_args(params_, lr, step);
    return u;
  }

 private:
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr,
              int64_t step) const override {
    const cpu::RmspropArgs args = rmsprop_args(params_, lr, step);
    each_segment(segments, state, [&](const Segment& s, std::span<std::byte* const> at) {
      cpu::RmspropState parts{at[0]};
      size_t next = 1;
      if (params_.momentum > 0.0) parts.momentum_buffer = at[next++];
      if (params_.centered) parts.grad_avg = at[next++];
      cpu::rmsprop_step(s.params, s.param_type, s.grads, s.grad_type, parts, state[0].storage, s.size, args);
    });
  }

  RmspropParams params_;
};

}  // namespace

cpu::RmspropArgs rmsprop_args(const RmspropParams& params, double lr, int64_t step) {
  return {static_cast<float>(lr),           static_cast<float>(params.alpha),
          static_cast<float>(1.0 - params.alpha), static_cast<float>(params.eps),
          static_cast<float>(params.weight_decay), static_cast<float>(params.momentum),
          params.centered,                  step == 1};
}

std::unique_ptr<Optimizer> make_rmsprop(const RmspropParams& params, size_t n, amp::Storage state) {
  return std::make_unique<Rmsprop>(params, n, state);
}

}  // namespace ds::optim
