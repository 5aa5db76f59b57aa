// 1-bit Adam as DeepSpeed's OnebitAdam (fp16/onebit/adam.py), per element in fp32, no bias correction:
//   step 1        nothing changes (DeepSpeed's set-up step; the gradient is dropped)
//   2 … W         warm-up, W = max(freeze_step, 2), on the engine's averaged gradient g:
//                   m ← β1·m + (1−β1)·g    v ← β2·v + (1−β2)·g²
//                   p ← p − lr·(m/(√v + eps) + wd·p)          (wd·p only when wd > 0)
//   W+1 …         compression: the engine's all-reduce is off, v is frozen, g is this rank's own:
//                   m ← β1·m + (1−β1)·g;  m ← compressed_allreduce(m)  (per tensor, with error feedback)
//                   p ← p − lr·(m/(√v + eps) + wd·p)
// With one rank nothing is compressed (as DeepSpeed). The errors are not checkpointed: zero after a load.
#include <optional>

#include "optim/onebit_common.h"
#include "optim/optimizers.h"
#include "optim/tensor_views.h"

namespace ds::optim {
namespace {

class OneBitAdam final : public Optimizer {
 public:
  OneBitAdam(const OneBitAdamParams& params, size_t n, ProcessGroup& group)
      : params_(params), group_(group), exp_avg_(n, 0.0f), exp_avg_sq_(n, 0.0f) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    const size_t n = check_step_args("OneBitAdam", segments, exp_avg_.size(), step);
    const std::vector<TensorView> views = locate_tensors("OneBitAdam", segments, tensors, n);
    if (step == 1) return;
    const OneBitArgs a(params_);
    const bool warmup = wants_averaged_gradients(step);
    for (const TensorView& t : views) {
      float* m = exp_avg_.data() + t.offset;
      float* v = exp_avg_sq_.data() + t.offset;
      for (size_t i = 0; i < t.size; ++i) m[i] = a.momentum(m[i], t.grads[i]);
      if (warmup)
        for (size_t i = 0; i < t.size; ++i) v[i] = a.variance(v[i], t.grads[i]);
    }
    if (!warmup && group_.size() > 1) compress_tensors(compressor_, group_, exp_avg_, views);
    apply_direction(views, exp_avg_, exp_avg_sq_, a, static_cast<float>(lr));
  }

  bool wants_averaged_gradients(int64_t step) const override { return step <= last_warmup_step(params_.freeze_step); }

  std::vector<StateView> state() override {
    return {f32_state("exp_avg", exp_avg_), f32_state("exp_avg_sq", exp_avg_sq_)};
  }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

  void restored() override {
    if (compressor_) compressor_->reset_errors();
  }

  size_t extra_bytes() const override { return compressor_ ? compressor_->bytes() : 0; }

 private:
  OneBitAdamParams params_;
  ProcessGroup& group_;
  std::vector<float> exp_avg_;     // m, n floats
  std::vector<float> exp_avg_sq_;  // v, n floats; frozen after the warm-up
  std::optional<CompressedAllreduce> compressor_;  // per-tensor errors, from the first compressed step
};

}  // namespace

std::unique_ptr<Optimizer> make_onebit_adam(const OneBitAdamParams& params, size_t n, ProcessGroup& group) {
  return std::make_unique<OneBitAdam>(params, n, group);
}

}  // namespace ds::optim
