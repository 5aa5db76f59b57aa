// SGD as torch.optim.SGD, per element in fp32:
//   g ← g + wd·p
//   with momentum μ ≠ 0:  buf ← g on the first step, else buf ← μ·buf + (1 − dampening)·g
//                         g ← g + μ·buf (nesterov) or g ← buf
//   p ← p − lr·g
// torch creates the momentum buffer on its first step; here "first" is step == 1, which also
// holds after a resume (the buffer then comes from the checkpoint and step > 1).
#include "optim/optimizers.h"

namespace ds::optim {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const SgdParams& params, size_t n) : params_(params), n_(n) {
    if (params.momentum != 0.0) momentum_buffer_.assign(n, 0.0f);
  }

  void step(std::span<const Segment> segments, const std::vector<TensorRange>&, double lr, int64_t step) override {
    check_step_args("SGD", segments, n_, step);
    size_t k = 0;  // state offset of the segment
    for (const Segment& s : segments) {
      update(s.params, s.grads, momentum_buffer_.empty() ? nullptr : momentum_buffer_.data() + k, s.size, lr, step);
      k += s.size;
    }
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override {
    if (momentum_buffer_.empty()) return {};
    return {{"momentum_buffer", &momentum_buffer_}};
  }

 private:
  void update(float* __restrict p, const float* __restrict g, float* __restrict buf, size_t n, double lr_value,
              int64_t step) const {
    const float lr = static_cast<float>(lr_value), wd = static_cast<float>(params_.weight_decay);
    const float mu = static_cast<float>(params_.momentum);
    const float keep = static_cast<float>(1.0 - params_.dampening);
    if (mu == 0.0f) {
      for (size_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      return;
    }
    const bool first = step == 1, nesterov = params_.nesterov;
    for (size_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * p[i];
      const float b = first ? d : mu * buf[i] + keep * d;
      buf[i] = b;
      p[i] -= lr * (nesterov ? d + mu * b : b);
    }
  }

  SgdParams params_;
  size_t n_;
  std::vector<float> momentum_buffer_;  // n floats when momentum ≠ 0, else empty
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const SgdParams& params, size_t n) { return std::make_unique<Sgd>(params, n); }

}  // namespace ds::optim
