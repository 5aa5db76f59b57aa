// RMSprop as torch.optim.RMSprop, which DeepSpeed runs for "RMSprop" (the formulas and the loop:
// kernels/cpu/rmsprop.h). State, in torch's order and names: square_avg; momentum_buffer when momentum > 0;
// grad_avg when centered. torch creates them zeroed on its first step; here "first" is step == 1 (after a
// resume they come from the checkpoint). Parameters, gradients and the state may each be fp32 or bf16; plain
// RMSprop (no momentum, not centered) with fp32 state also steps on the GPU (device_update: the same element
// body in kernels/cuda/one_state.cuh).
#include "cpu/rmsprop.h"
#include "optim/optimizers.h"
#include "optim/state_buffer.h"

namespace ds::optim {
namespace {

class Rmsprop final : public Optimizer {
 public:
  Rmsprop(const RmspropParams& params, size_t n, amp::Storage state)
      : params_(params),
        n_(n),
        square_avg_(n, state),
        momentum_buffer_(params.momentum > 0.0 ? n : 0, state),
        grad_avg_(params.centered ? n : 0, state) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>&, double lr, int64_t step) override {
    check_step_args("RMSprop", segments, n_, step);
    update(segments, state(), lr, step);
  }

  bool elementwise() const override { return true; }
  void step_with_state(std::span<const Segment> segments, std::span<const StateView> state, double lr,
                       int64_t step) override {
    check_state_args("RMSprop", segments, state, this->state(), step);
    update(segments, state, lr, step);
  }

  void hold_state(bool held) override {
    square_avg_.hold(held);
    if (params_.momentum > 0.0) momentum_buffer_.hold(held);
    if (params_.centered) grad_avg_.hold(held);
  }
  std::vector<StateView> state() override {
    std::vector<StateView> views{square_avg_.view("square_avg")};
    if (params_.momentum > 0.0) views.push_back(momentum_buffer_.view("momentum_buffer"));
    if (params_.centered) views.push_back(grad_avg_.view("grad_avg"));
    return views;
  }

  std::optional<DeviceUpdate> device_update(double lr, int64_t step) const override {
    if (params_.momentum > 0.0 || params_.centered || square_avg_.storage() != amp::Storage::F32) return std::nullopt;
    DeviceUpdate u;
    u.kind = DeviceUpdate::Kind::rmsprop;
    u.rmsprop = rmsprop_args(params_, lr, step);
    return u;
  }

 private:
  // The segments' update, with the state in state() order.
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr, int64_t step) const {
    const cpu::RmspropArgs args = rmsprop_args(params_, lr, step);
    const amp::Storage storage = state[0].storage;
    const size_t bytes = amp::storage_bytes(storage);
    size_t k = 0;  // the segment's first element in the state
    for (const Segment& s : segments) {
      check_not_fp16(s.param_type, s.grad_type);
      auto at = [&](size_t i) { return static_cast<std::byte*>(state[i].data) + k * bytes; };
      cpu::RmspropState parts{at(0)};
      size_t next = 1;
      if (params_.momentum > 0.0) parts.momentum_buffer = at(next++);
      if (params_.centered) parts.grad_avg = at(next++);
      cpu::rmsprop_step(s.params, s.param_type, s.grads, s.grad_type, parts, storage, s.size, args);
      k += s.size;
    }
  }

  RmspropParams params_;
  size_t n_;
  StateBuffer square_avg_;       // [n]
  StateBuffer momentum_buffer_;  // [n] when momentum > 0, else empty
  StateBuffer grad_avg_;         // [n] when centered, else empty
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
