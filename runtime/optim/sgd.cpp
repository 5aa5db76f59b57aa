// SGD as torch.optim.SGD (the formulas and the loop: kernels/cpu/sgd_lamb.h). torch creates the momentum
// buffer on its first step; here "first" is step == 1, which also holds after a resume (the buffer then
// comes from the checkpoint and step > 1). Parameters, gradients and the buffer may each be fp32 or bf16.
#include "cpu/sgd_lamb.h"
#include "optim/elementwise.h"
#include "optim/optimizers.h"

namespace ds::optim {
namespace {

// State: momentum_buffer when momentum ≠ 0, else none.
class Sgd final : public ElementwiseOptimizer {
 public:
  Sgd(const SgdParams& params, size_t n, amp::Storage state)
      : ElementwiseOptimizer("SGD", n, state, params.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"}
                                                                     : std::vector<std::string>{}),
        params_(params) {}

  std::optional<DeviceUpdate> device_update(double lr, int64_t step) const override {
    if (params_.momentum != 0.0 && state_storage() != amp::Storage::F32) return std::nullopt;
    DeviceUpdate u;
    u.kind = DeviceUpdate::Kind::sgd;
    u.sgd = args(lr, step);
    return u;
  }

 private:
  cpu::SgdArgs args(double lr, int64_t step) const {
    return {static_cast<float>(lr), static_cast<float>(params_.weight_decay), static_cast<float>(params_.momentum),
            static_cast<float>(1.0 - params_.dampening), params_.nesterov, step == 1};
  }

  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr,
              int64_t step) const override {
    const amp::Storage storage = state.empty() ? amp::Storage::F32 : state[0].storage;
    const cpu::SgdArgs args = this->args(lr, step);
    each_segment(segments, state, [&](const Segment& s, std::span<std::byte* const> buf) {
      cpu::sgd_step(s.params, s.param_type, s.grads, s.grad_type, buf.empty() ? nullptr : buf[0], storage, s.size,
                    args);
    });
  }

  SgdParams params_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const SgdParams& params, size_t n, amp::Storage state) {
  return std::make_unique<Sgd>(params, n, state);
}

}  // namespace ds::optim
