// Adagrad as torch.optim.Adagrad, which DeepSpeed runs for "Adagrad" (the formulas and the loop:
// kernels/cpu/adagrad.h): one buffer, the sum of squared gradients ("sum", torch's name), started at
// initial_accumulator_value on the first step (step == 1; after a resume it comes from the checkpoint).
// Parameters, gradients and the sum may each be fp32 or bf16; with an fp32 sum it also steps on the GPU
// (device_update: the same element body in kernels/cuda/one_state.cuh).
#include "cpu/adagrad.h"
#include "optim/optimizers.h"
#include "optim/elementwise.h"

namespace ds::optim {
namespace {

// State: sum.
class Adagrad final : public ElementwiseOptimizer {
 public:
  Adagrad(const AdagradParams& params, size_t n, amp::Storage state)
      : ElementwiseOptimizer("Adagrad", n, state, {"sum"}), params_(params) {}

  std::optional<DeviceUpdate> device_update(double lr, int64_t step) const override {
    if (state_storage() != amp::Storage::F32) return std::nullopt;
    DeviceUpdate u;
    u.kind = DeviceUpdate::Kind::adagrad;
    u.adagrad = adagrad_args(params_, lr, step);
    return u;
  }

 private:
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr,
              int64_t step) const override {
    const cpu::AdagradArgs args = adagrad_args(params_, lr, step);
    each_segment(segments, state, [&](const Segment& s, std::span<std::byte* const> sum) {
      cpu::adagrad_step(s.params, s.param_type, s.grads, s.grad_type, sum[0], state[0].storage, s.size, args);
    });
  }

  AdagradParams params_;
};

}  // namespace

cpu::AdagradArgs adagrad_args(const AdagradParams& params, double lr, int64_t step) {
  const double clr = lr / (1.0 + static_cast<double>(step - 1) * params.lr_decay);
  return {static_cast<float>(clr), static_cast<float>(params.weight_decay), static_cast<float>(params.eps),
          static_cast<float>(params.initial_accumulator_value), step == 1};
}

std::unique_ptr<Optimizer> make_adagrad(const AdagradParams& params, size_t n, amp::Storage state) {
  return std::make_unique<Adagrad>(params, n, state);
}

}  // namespace ds::optim
