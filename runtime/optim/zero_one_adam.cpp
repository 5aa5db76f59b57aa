// 0/1 Adam as DeepSpeed's ZeroOneAdam (fp16/onebit/zoadam.py), per element in fp32, no bias
// correction. Step 1 changes nothing (DeepSpeed's set-up step). Then, with V = var_freeze_step:
//   phase 1, steps 2 … max(V,1)+1. The variance is updated at steps t ≡ 0 mod I (I = var_interval,
//   1 at first, doubled after every var_update_scaler such updates); only those steps use the
//   engine's averaged gradient g:
//     t ≡ 0 mod I:  v ← β2·v + (1−β2)·g²;  m ← β1·m + (1−β1)·g
//     otherwise:    ĝ = compressed_allreduce(own gradient) (error feedback);  m ← β1·m + (1−β1)·ĝ
//     p ← p − lr·u,  u = m/(√v + eps) + wd·p
//   phase 2, from step max(V,1)+2 (v frozen, the errors zeroed once, no engine all-reduce): local steps
//     m ← β1·m + (1−β1)·g_own;  p ← p − lr·u;  acc ← acc − lr·u;  lrs ← lrs + lr
//   and at steps t ≡ 0 mod H (H = local_step_interval, 1 at first, doubled every local_step_scaler
//   phase-2 steps up to local_step_clipper) a sync:
//     p ← p_sync;  acc ← compressed_allreduce(acc·(√v + eps));  m ← −acc/lrs;  p ← p + acc/(√v + eps);
//     acc ← 0;  lrs ← 0;  p_sync ← p
//   where p_sync is p after the previous sync (DeepSpeed computes it as p − acc, which rounds
//   differently on each rank, so its replicas drift apart by a few ulps at every sync; here they stay
//   bit-identical).
// Both schedules are functions of the step alone, so a checkpoint load re-derives them; it zeroes the
// errors, acc and lrs (DeepSpeed drops all three on load) and takes p_sync from the loaded parameters. Differences from DeepSpeed, all after its
// bugs: with one rank, phase-1 steps without a variance update still update m (DeepSpeed skips the
// whole update when there is nobody to all-reduce with), and a load neither repeats the set-up step
// nor resets the schedules (DeepSpeed does both, and then updates v once from an unaveraged gradient).
#include <algorithm>
#include <optional>

#include "optim/onebit_common.h"
#include "optim/optimizers.h"
#include "optim/tensor_views.h"

namespace ds::optim {
namespace {

class ZeroOneAdam final : public Optimizer {
 public:
  ZeroOneAdam(const ZeroOneAdamParams& params, size_t n, ProcessGroup& group)
      : params_(params), group_(group), exp_avg_(n, 0.0f), exp_avg_sq_(n, 0.0f), work_(n, 0.0f) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    const size_t n = check_step_args("ZeroOneAdam", segments, exp_avg_.size(), step);
    const std::vector<TensorView> views = locate_tensors("ZeroOneAdam", segments, tensors, n);
    if (step == 1) return;
    if (step < first_local_step()) {
      variance_phase(views, lr, step);
    } else {
      if (!local_started_) start_local_steps(views);
      local_step(views, lr, step);
    }
  }

  bool wants_averaged_gradients(int64_t step) const override {
    if (step <= 2) return true;  // the set-up step, and I = 1 at step 2
    return step < first_local_step() && step % var_interval_at(step) == 0;
  }

  std::vector<StateView> state() override {
    return {f32_state("exp_avg", exp_avg_), f32_state("exp_avg_sq", exp_avg_sq_)};
  }

  void set_betas(double beta1, double beta2) override {
    params_.beta1 = beta1;
    params_.beta2 = beta2;
  }

  void restored() override {
    if (compressor_) compressor_->reset_errors();
    local_started_ = false;  // phase 2 starts afresh: acc, lrs and p_sync from the loaded state
  }

  size_t extra_bytes() const override {
    return (work_.size() + anchor_.size()) * sizeof(float) + (compressor_ ? compressor_->bytes() : 0);
  }

 private:
  int64_t first_local_step() const { return std::max<int64_t>(params_.var_freeze_step, 1) + 2; }

  // I in force at phase-1 step t: the schedule replayed from step 2 (cached, so stepping on costs O(1)).
  int64_t var_interval_at(int64_t t) const {
    if (schedule_step_ > t - 1) schedule_step_ = 1, var_interval_ = 1, var_counter_ = 0;
    for (; schedule_step_ < t - 1; ++schedule_step_) {
      const int64_t s = schedule_step_ + 1;  // the step whose end updates the schedule
      if (s < 2 || s % var_interval_ != 0) continue;
      if (++var_counter_ == params_.var_update_scaler) {
        var_counter_ = 0;
        var_interval_ *= 2;
      }
    }
    return var_interval_;
  }

  // H in force at phase-2 step t.
  int64_t local_interval_at(int64_t t) const {
    const int64_t doublings = (t - first_local_step()) / params_.local_step_scaler;
    int64_t h = 1;
    for (int64_t d = 0; d < doublings && h < params_.local_step_clipper; ++d) h *= 2;
    return std::min(h, params_.local_step_clipper);
  }

  void variance_phase(const std::vector<TensorView>& views, double lr, int64_t step) {
    const OneBitArgs a(params_);
    if (wants_averaged_gradients(step)) {
      for (const TensorView& t : views)
        for (size_t i = 0; i < t.size; ++i) {
          exp_avg_sq_[t.offset + i] = a.variance(exp_avg_sq_[t.offset + i], t.grads[i]);
          exp_avg_[t.offset + i] = a.momentum(exp_avg_[t.offset + i], t.grads[i]);
        }
    } else {
      for (const TensorView& t : views) std::copy_n(t.grads, t.size, work_.data() + t.offset);
      if (group_.size() > 1) compress_tensors(compressor_, group_, work_, views);
      for (const TensorView& t : views)
        for (size_t i = 0; i < t.size; ++i) exp_avg_[t.offset + i] = a.momentum(exp_avg_[t.offset + i], work_[t.offset + i]);
    }
    apply_direction(views, exp_avg_, exp_avg_sq_, a, static_cast<float>(lr));
  }

  void start_local_steps(const std::vector<TensorView>& views) {
    if (compressor_) compressor_->reset_errors();  // they held gradient errors; now they hold acc's
    std::fill(work_.begin(), work_.end(), 0.0f);
    anchor_.resize(work_.size());
    for (const TensorView& t : views) std::copy_n(t.params, t.size, anchor_.data() + t.offset);
    lrs_ = 0.0;
    local_started_ = true;
  }

  void local_step(const std::vector<TensorView>& views, double lr, int64_t step) {
    const OneBitArgs a(params_);
    for (const TensorView& t : views)
      for (size_t i = 0; i < t.size; ++i) exp_avg_[t.offset + i] = a.momentum(exp_avg_[t.offset + i], t.grads[i]);
    lrs_ += lr;
    apply_direction(views, exp_avg_, exp_avg_sq_, a, static_cast<float>(lr), work_.data());
    if (step % local_interval_at(step) != 0) return;
    for (const TensorView& t : views) {
      float* acc = work_.data() + t.offset;
      const float* v = exp_avg_sq_.data() + t.offset;
      std::copy_n(anchor_.data() + t.offset, t.size, t.params);
      for (size_t i = 0; i < t.size; ++i) acc[i] *= a.denominator(v[i]);
    }
    if (group_.size() > 1) compress_tensors(compressor_, group_, work_, views);
    const float lrs = static_cast<float>(lrs_);
    for (const TensorView& t : views) {
      float* acc = work_.data() + t.offset;
      const float* v = exp_avg_sq_.data() + t.offset;
      for (size_t i = 0; i < t.size; ++i) {
        exp_avg_[t.offset + i] = -(acc[i] / lrs);
        t.params[i] += acc[i] / a.denominator(v[i]);
        acc[i] = 0.0f;
      }
      std::copy_n(t.params, t.size, anchor_.data() + t.offset);
    }
    lrs_ = 0.0;
  }

  ZeroOneAdamParams params_;
  ProcessGroup& group_;
  std::vector<float> exp_avg_;     // m, n floats
  std::vector<float> exp_avg_sq_;  // v, n floats
  std::vector<float> work_;        // n floats: phase 1 the gradient to compress, phase 2 acc (DeepSpeed's momentum_accumulator)
  std::vector<float> anchor_;      // phase 2: p_sync, n floats
  double lrs_ = 0.0;               // Σ lr since the last sync
  bool local_started_ = false;     // phase 2's set-up done (errors, acc, lrs zeroed)
  std::optional<CompressedAllreduce> compressor_;
  // The variance schedule after the end of step schedule_step_: interval I and updates at this I.
  mutable int64_t schedule_step_ = 1, var_interval_ = 1, var_counter_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> make_zero_one_adam(const ZeroOneAdamParams& params, size_t n, ProcessGroup& group) {
  return std::make_unique<ZeroOneAdam>(params, n, group);
}

}  // namespace ds::optim
