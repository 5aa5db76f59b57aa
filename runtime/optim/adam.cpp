// Adam / AdamW in the form of DeepSpeed's CPU optimizers (csrc/includes/cpu_adam.h, which its CPU
// FusedAdam also runs), per element in fp32:
//   L2 mode (adam_w_mode false):  g ← g + wd·p
//   m ← β1·m + (1−β1)·g            v ← β2·v + (1−β2)·g²
//   AdamW mode:                   p ← p + (−lr·wd)·p
//   p ← p + (−lr/bc1) · m / (sqrt(v)·(1/sqrt(bc2)) + eps)      bc = 1 − β^t, or 1 without bias correction
// One division per element (the GPU FusedAdam form, (m/bc1)/(sqrt(v/bc2)+eps), has two and is the same
// algebraically). Unlike DeepSpeed's AVX paths no multiply-add is fused, so every build and CPU gives the
// same bits.
// Elements are independent: each segment is cut into fixed chunks run on the OpenMP threads (the
// count dsworker sets), so the result is the same at any thread count. Parameters, gradients and
// moments may each be fp32 or bf16 (elements.h); fp32 ones give exactly the plain float loop.
#include <algorithm>
#include <cmath>

#include "optim/adam_element.h"
#include "optim/elements.h"
#include "optim/optimizers.h"

namespace ds::optim {
namespace {

constexpr size_t kChunk = 65536;  // elements per parallel task

template <bool kDecoupled, class P, class G, class S>
DS_OPTIM_BULK void adam_loop(P* __restrict p, const G* __restrict g, S* __restrict m, S* __restrict v, size_t n,
                             AdamArgs a) {
  for (size_t i = 0; i < n; ++i) {
    float param = load(p[i]), mi = load(m[i]), vi = load(v[i]);
    adam_element<kDecoupled>(param, load(g[i]), mi, vi, a);
    store(m[i], mi);
    store(v[i], vi);
    store(p[i], param);
  }
}

template <bool kDecoupled, class P, class G, class S>
void adam_parallel(P* p, const G* g, S* m, S* v, size_t n, AdamArgs a) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t at = c * kChunk, len = std::min(kChunk, n - at);
    adam_loop<kDecoupled>(p + at, g + at, m + at, v + at, len, a);
  }
}

class Adam final : public Optimizer {
 public:
  Adam(const AdamParams& params, size_t n, amp::Storage state)
      : params_(params), exp_avg_(n, state), exp_avg_sq_(n, state) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>&, double lr, int64_t step) override {
    check_step_args("Adam", segments, exp_avg_.size(), step);
    update(segments, state(), lr, step);
  }

  bool elementwise() const override { return true; }
  void step_with_state(std::span<const Segment> segments, std::span<const StateView> state, double lr,
                       int64_t step) override {
    check_state_args("Adam", segments, state, this->state(), step);
    update(segments, state, lr, step);
  }

  std::vector<StateView> state() override { return {exp_avg_.view("exp_avg"), exp_avg_sq_.view("exp_avg_sq")}; }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

 private:
  // The segments' update with their moments in state[0] (m) and state[1] (v).
  void update(std::span<const Segment> segments, std::span<const StateView> state, double lr, int64_t step) const {
    const float beta1 = static_cast<float>(params_.beta1), beta2 = static_cast<float>(params_.beta2);
    const float lr_f = static_cast<float>(lr), wd = static_cast<float>(params_.weight_decay);
    const float bc1 = params_.bias_correction ? bias_correction(beta1, step) : 1.0f;
    const float bc2 = params_.bias_correction ? bias_correction(beta2, step) : 1.0f;
    const AdamArgs a{beta1, beta2, static_cast<float>(params_.eps), wd, -lr_f / bc1, 1.0f / std::sqrt(bc2), -lr_f * wd};
    size_t k = 0;  // state offset of the segment
    for (const Segment& s : segments) {
      with_elements(s.param_type, s.grad_type, [&]<class P, class G>(P*, G*) {
        with_element(state[0].storage, [&]<class S>(S*) {
          auto* p = static_cast<P*>(s.params);
          const auto* g = static_cast<const G*>(s.grads);
          S *m = static_cast<S*>(state[0].data) + k, *v = static_cast<S*>(state[1].data) + k;
          if (params_.adam_w_mode) adam_parallel<true>(p, g, m, v, s.size, a);
          else adam_parallel<false>(p, g, m, v, s.size, a);
        });
      });
      k += s.size;
    }
  }

  AdamParams params_;
  StateBuffer exp_avg_;     // m [n]
  StateBuffer exp_avg_sq_;  // v [n]
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const AdamParams& params, size_t n, amp::Storage state) {
  return std::make_unique<Adam>(params, n, state);
}

}  // namespace ds::optim
