// SGD as torch.optim.SGD, per element in fp32:
//   g ← g + wd·p
//   with momentum μ ≠ 0:  buf ← g on the first step, else buf ← μ·buf + (1 − dampening)·g
//                         g ← g + μ·buf (nesterov) or g ← buf
//   p ← p − lr·g
// torch creates the momentum buffer on its first step; here "first" is step == 1, which also
// holds after a resume (the buffer then comes from the checkpoint and step > 1). Parameters,
// gradients and the buffer may each be fp32 or bf16 (elements.h).
#include "optim/elements.h"
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

  std::vector<StateView> state() override {
    if (params_.momentum == 0.0) return {};
    return {momentum_buffer_.view("momentum_buffer")};
  }

 private:
  // The segments' update, with the momentum buffer in state[0] (none without momentum).
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr, int64_t step) const {
    const amp::Storage storage = state.empty() ? amp::Storage::F32 : state[0].storage;
    size_t k = 0;  // state offset of the segment
    for (const Segment& s : segments) {
      with_elements(s.param_type, s.grad_type, [&]<class P, class G>(P*, G*) {
        with_element(storage, [&]<class S>(S*) {
          S* buf = state.empty() ? nullptr : static_cast<S*>(state[0].data) + k;
          update(static_cast<P*>(s.params), static_cast<const G*>(s.grads), buf, s.size, lr, step);
        });
      });
      k += s.size;
    }
  }

  template <class P, class G, class S>
  void update(P* __restrict p, const G* __restrict g, S* __restrict buf, size_t n, double lr_value,
              int64_t step) const {
    const float lr = static_cast<float>(lr_value), wd = static_cast<float>(params_.weight_decay);
    const float mu = static_cast<float>(params_.momentum);
    const float keep = static_cast<float>(1.0 - params_.dampening);
    if (mu == 0.0f) {
      for (size_t i = 0; i < n; ++i) {
        const float param = load(p[i]);
        store(p[i], param - lr * (load(g[i]) + wd * param));
      }
      return;
    }
    const bool first = step == 1, nesterov = params_.nesterov;
    for (size_t i = 0; i < n; ++i) {
      const float param = load(p[i]);
      const float d = load(g[i]) + wd * param;
      const float b = first ? d : mu * load(buf[i]) + keep * d;
      store(buf[i], b);
      store(p[i], param - lr * (nesterov ? d + mu * b : b));
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
