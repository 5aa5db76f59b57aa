// SGD as torch.optim.SGD (the formulas and the loop: kernels/cpu/sgd_lamb.h). torch creates the momentum
// buffer on its first step; here "first" is step == 1, which also holds after a resume (the buffer then
// comes from the checkpoint and step > 1). Parameters, gradients and the buffer may each be fp32 or bf16.
#include "cpu/sgd_lamb.h"
#include "optim/state_buffer.h"
#include "optim/optimizers.h"

namespace ds::optim {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const SgdParams& params, size_t n, amp::Storage state)
      : params_(params), n_(n), momentum_buffer_(params.momentum != 0.0 ? n : 0, state) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>&, double lr, int64_t step) override {
    check_step_args("SGD", segments, n_, step);
    update(segments, state(), lr, step);
  }

  bool elementwise() const override { return true; }
  void step_with_state(std::span<const Segment> segments, std::span<const StateView> state, double lr,
                       int64_t step) override {
    check_state_args("SGD", segments, state, this->state(), step);
    update(segments, state, lr, step);
  }

  void hold_state(bool held) override {
    momentum_buffer_.hold(held);
  }
  std::vector<StateView> state() override {
    if (params_.momentum == 0.0) return {};
    return {momentum_buffer_.view("momentum_buffer")};
  }

  std::optional<DeviceUpdate> device_update(double lr, int64_t step) const override {
    if (params_.momentum != 0.0 && momentum_buffer_.storage() != amp::Storage::F32) return std::nullopt;
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

  // The segments' update, with the momentum buffer in state[0] (none without momentum).
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr, int64_t step) const {
    const amp::Storage storage = state.empty() ? amp::Storage::F32 : state[0].storage;
    const cpu::SgdArgs args = this->args(lr, step);
    size_t k = 0;  // state offset of the segment
    for (const Segment& s : segments) {
      check_not_fp16(s.param_type, s.grad_type);
      std::byte* buf = state.empty() ? nullptr : static_cast<std::byte*>(state[0].data) + k * amp::storage_bytes(storage);
      cpu::sgd_step(s.params, s.param_type, s.grads, s.grad_type, buf, storage, s.size, args);
      k += s.size;
    }
  }

  SgdParams params_;
  size_t n_;
  StateBuffer momentum_buffer_;  // [n] when momentum ≠ 0, else empty
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const SgdParams& params, size_t n, amp::Storage state) {
  return std::make_unique<Sgd>(params, n, state);
}

}  // namespace ds::optim
