// Learning-rate schedules with DeepSpeed's formulas and defaults (deepspeed/runtime/lr_schedules.py,
// reference deepspeed-runtime.md §5), as pure functions of the update count.
//
// The counter: k = 1, 2, … numbers the optimizer updates actually *applied* — k is 1 + the number of
// updates applied before this one; fp16 overflow-skipped steps do not count, because DeepSpeed steps
// its scheduler only after an applied update. In DeepSpeed's terms the scheduler is built with
// last_batch_iteration t = −1, which sets the lr of update 1, and each applied update advances t, so
// update k runs with the schedule's value at t = k − 2. E.g. WarmupLR gives warmup_min_lr to updates
// 1 and 2 (t = −1 and t = 0), and WarmupCosineLR gives lr 0 to update 1 (DeepSpeed's value at t = −1,
// reproduced). torch.optim.lr_scheduler's classes (DeepSpeed builds them by name) step once when made,
// so update k runs with their value at epoch k − 1. The same k is the `step` to pass to Optimizer::step.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "config/ds_config.h"

namespace ds {

struct Betas {
  double beta1, beta2;
};

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // Learning rate of update k (k >= 1; std::invalid_argument otherwise).
  virtual double lr(int64_t k) const = 0;
  // (beta1, beta2) the schedule installs for update k — OneCycle with cycle_momentum cycles beta1
  // and forces beta2 = 0.99 — or nullopt to leave the optimizer's own.
  virtual std::optional<Betas> betas(int64_t k) const;
};

// The schedule `config` describes; nullopt: constant base_lr. base_lr (the optimizer's lr) is used by
// WarmupCosineLR (ratios of it), torch's schedulers (factors of it) and the constant schedule; WarmupLR,
// WarmupDecayLR, OneCycle and LRRangeTest set absolute learning rates from their own parameters, as in
// DeepSpeed.
std::unique_ptr<LrSchedule> make_lr_schedule(const std::optional<SchedulerConfig>& config, double base_lr);

}  // namespace ds
