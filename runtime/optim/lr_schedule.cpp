// The schedules of lr_schedule.h. DeepSpeed's each compute its get_lr() at t = k − 2, with the same
// floating-point expression order as lr_schedules.py; torch's their closed form at epoch k − 1.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>

namespace ds {
namespace {

// DeepSpeed's last_batch_iteration when update k runs.
int64_t iteration(int64_t k) {
  if (k < 1) throw std::invalid_argument(fmt::format("LrSchedule: update {} < 1", k));
  return k - 2;
}

class Constant final : public LrSchedule {
 public:
  explicit Constant(double lr) : lr_(lr) {}
  double lr(int64_t k) const override {
    iteration(k);
    return lr_;
  }

 private:
  double lr_;
};

// The warmup fraction γ(t) for 0 <= t < W, W = max(2, warmup_num_steps):
// log: ln(t+1)/ln(W) (as (1/ln W)·ln(t+1)); linear: t/W.
class Warmup {
 public:
  Warmup(int64_t warmup_num_steps, WarmupType type)
      : steps_(std::max<int64_t>(2, warmup_num_steps)), type_(type), inverse_log_(1.0 / std::log(double(steps_))) {}
  int64_t steps() const { return steps_; }
  double gamma(int64_t t) const {
    return type_ == WarmupType::log ? inverse_log_ * std::log(double(t + 1)) : double(t) / double(steps_);
  }

 private:
  int64_t steps_;
  WarmupType type_;
  double inverse_log_;
};

// WarmupLR: min + (max − min)·γ during warmup, then max; min before the first scheduler step.
// WarmupDecayLR: after warmup γ = max(0, (T − t) / max(1, T − W)), reaching min at t = T.
class WarmupLinearDecay final : public LrSchedule {
 public:
  WarmupLinearDecay(const WarmupParams& p, bool decay)
      : min_(p.warmup_min_lr), delta_(p.warmup_max_lr - p.warmup_min_lr), warmup_(p.warmup_num_steps, p.warmup_type),
        decay_(decay), total_(p.total_num_steps) {}

  double lr(int64_t k) const override {
    const int64_t t = iteration(k);
    if (t < 0) return min_;
    return min_ + delta_ * gamma(t);
  }

 private:
  double gamma(int64_t t) const {
    if (t < warmup_.steps()) return warmup_.gamma(t);
    if (!decay_) return 1.0;
    return std::max(0.0, double(total_ - t) / std::max(1.0, double(total_ - warmup_.steps())));
  }

  double min_, delta_;
  Warmup warmup_;
  bool decay_;
  int64_t total_;
};

// WarmupCosineLR: base·ratio; ratio = wmr + (1 − wmr)·γ during warmup, then
// max(0, cmr + (1 − cmr)·(1 + cos(π·(t − W + 1)/(T − W)))/2) (not clamped past T: the cosine rises
// again). Before the first scheduler step DeepSpeed sets lr 0.
class WarmupCosine final : public LrSchedule {
 public:
  WarmupCosine(const WarmupCosineParams& p, double base_lr)
      : base_(base_lr), p_(p), warmup_(p.warmup_num_steps, p.warmup_type) {}

  double lr(int64_t k) const override {
    const int64_t t = iteration(k);
    if (t < 0) return 0.0;
    return base_ * ratio(t);
  }

 private:
  double ratio(int64_t t) const {
    const int64_t w = warmup_.steps();
    if (t < w) return p_.warmup_min_ratio + warmup_.gamma(t) * (1.0 - p_.warmup_min_ratio);
    const double real_last_step = double(t - w + 1), real_total_steps = double(p_.total_num_steps - w);
    const double cosine = (1.0 + std::cos(std::numbers::pi * real_last_step / real_total_steps)) / 2.0;
    return std::max(0.0, p_.cos_min_ratio + (1.0 - p_.cos_min_ratio) * cosine);
  }

  double base_;
  WarmupCosineParams p_;
  Warmup warmup_;
};

// OneCycle: one triangle from min to max (first_step_size updates) and back (second_step_size),
// then min, or min / (1 + decay_lr_rate·(t − total + 1)/decay_step_size) with decay. Momentum
// (beta1) runs the opposite way between max_mom and min_mom, then max_mom, or
// max_mom·(1 + decay_mom_rate·(t − total + 1)/decay_step_size) with decay; beta2 is 0.99. The first
// update runs with (cycle_min_mom, 0.99), which DeepSpeed installs at construction.
class OneCycle final : public LrSchedule {
 public:
  explicit OneCycle(const OneCycleParams& p)
      : p_(p), total_(p.cycle_first_step_size + p.cycle_second_step_size), ratio_(p.cycle_first_step_size / total_),
        skip_lr_decay_(p.decay_step_size == 0 || p.decay_lr_rate == 0),
        skip_mom_decay_(p.decay_step_size == 0 || p.decay_mom_rate == 0) {}

  double lr(int64_t k) const override {
    const int64_t t = iteration(k);
    if (double(t) < total_) return p_.cycle_min_lr + (p_.cycle_max_lr - p_.cycle_min_lr) * scale_factor(t);
    if (skip_lr_decay_) return p_.cycle_min_lr;
    return p_.cycle_min_lr / (1 + p_.decay_lr_rate * (double(t - total_ + 1) / p_.decay_step_size));
  }

  std::optional<Betas> betas(int64_t k) const override {
    const int64_t t = iteration(k);
    if (!p_.cycle_momentum) return std::nullopt;
    if (t < 0) return Betas{p_.cycle_min_mom, kBeta2};
    if (double(t) < total_)
      return Betas{p_.cycle_max_mom - (p_.cycle_max_mom - p_.cycle_min_mom) * scale_factor(t), kBeta2};
    if (skip_mom_decay_) return Betas{p_.cycle_max_mom, kBeta2};
    return Betas{p_.cycle_max_mom * (1 + p_.decay_mom_rate * (double(t - total_ + 1) / p_.decay_step_size)), kBeta2};
  }

 private:
  static constexpr double kBeta2 = 0.99;

  // Position in the triangle, 0 at the ends, 1 at the peak (DeepSpeed's _get_scale_factor).
  double scale_factor(int64_t t) const {
    const double b = double(t + 1);
    const double cycle = std::floor(1 + b / total_);
    const double x = 1. + b / total_ - cycle;
    return x <= ratio_ ? x / ratio_ : (x - 1) / (ratio_ - 1);
  }

  OneCycleParams p_;
  double total_, ratio_;
  bool skip_lr_decay_, skip_mom_decay_;
};

// LRRangeTest: min·(1 + rate·(t + 1)/size), the quotient floored with staircase (min at the first update).
class RangeTest final : public LrSchedule {
 public:
  explicit RangeTest(const LrRangeTestParams& p) : p_(p) {}
  double lr(int64_t k) const override {
    const double interval = double(iteration(k) + 1) / double(p_.step_size);
    return p_.min_lr * (1 + p_.step_rate * (p_.staircase ? std::floor(interval) : interval));
  }

 private:
  LrRangeTestParams p_;
};

// The torch.optim.lr_scheduler classes at epoch e = k − 1 (torch steps a scheduler once when it is made,
// which sets update 1's lr, and DeepSpeed once after each applied update), by torch's closed forms; torch's
// own step() multiplies the previous lr instead, which differs in the last bits.
class TorchSchedule final : public LrSchedule {
 public:
  TorchSchedule(SchedulerType type, const TorchScheduleParams& p, double base_lr) : type_(type), p_(p), base_(base_lr) {}

  double lr(int64_t k) const override {
    const int64_t epoch = iteration(k) + 1;
    const double e = double(epoch);
    switch (type_) {
      case SchedulerType::StepLR: return base_ * std::pow(p_.gamma, double(epoch / p_.step_size));
      case SchedulerType::MultiStepLR: {  // γ per milestone reached (a repeated one counts each time)
        const auto passed = std::upper_bound(p_.milestones.begin(), p_.milestones.end(), epoch) - p_.milestones.begin();
        return base_ * std::pow(p_.gamma, double(passed));
      }
      case SchedulerType::ConstantLR:
        return base_ * (p_.factor + (epoch >= p_.total_iters ? 1.0 - p_.factor : 0.0));
      case SchedulerType::LinearLR: {
        const double total = double(p_.total_iters);
        return base_ * (p_.start_factor + (p_.end_factor - p_.start_factor) * std::min(total, e) / total);
      }
      case SchedulerType::ExponentialLR: return base_ * std::pow(p_.gamma, e);
      case SchedulerType::PolynomialLR: {
        const double total = double(p_.total_iters);
        return base_ * std::pow(1.0 - std::min(total, e) / total, p_.power);
      }
      case SchedulerType::CosineAnnealingLR: return cosine(e, p_.T_max);
      case SchedulerType::CosineAnnealingWarmRestarts: {  // cycles of T_0, T_0·T_mult, T_0·T_mult², …
        int64_t t_cur = epoch, t_i = p_.T_0;
        if (p_.T_mult == 1) t_cur %= t_i;
        while (t_cur >= t_i) {
          t_cur -= t_i;
          t_i *= p_.T_mult;
        }
        return cosine(double(t_cur), double(t_i));
      }
      default: throw std::logic_error("TorchSchedule: not a torch scheduler");
    }
  }

 private:
  double cosine(double t, double period) const {
    return p_.eta_min + (base_ - p_.eta_min) * (1 + std::cos(std::numbers::pi * t / period)) / 2;
  }

  SchedulerType type_;
  TorchScheduleParams p_;
  double base_;
};

}  // namespace

std::optional<Betas> LrSchedule::betas(int64_t k) const {
  iteration(k);
  return std::nullopt;
}

std::unique_ptr<LrSchedule> make_lr_schedule(const std::optional<SchedulerConfig>& config, double base_lr) {
  if (!config) return std::make_unique<Constant>(base_lr);
  switch (config->type) {
    case SchedulerType::WarmupLR:
      return std::make_unique<WarmupLinearDecay>(std::get<WarmupParams>(config->params), false);
    case SchedulerType::WarmupDecayLR:
      return std::make_unique<WarmupLinearDecay>(std::get<WarmupParams>(config->params), true);
    case SchedulerType::WarmupCosineLR:
      return std::make_unique<WarmupCosine>(std::get<WarmupCosineParams>(config->params), base_lr);
    case SchedulerType::OneCycle: return std::make_unique<OneCycle>(std::get<OneCycleParams>(config->params));
    case SchedulerType::LRRangeTest: return std::make_unique<RangeTest>(std::get<LrRangeTestParams>(config->params));
    default:
      return std::make_unique<TorchSchedule>(config->type, std::get<TorchScheduleParams>(config->params), base_lr);
  }
}

}  // namespace ds
