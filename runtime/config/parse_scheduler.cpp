// The `scheduler` section: DeepSpeed's own schedules (names are case-sensitive, as DeepSpeed looks
// them up with getattr) with the keyword arguments and defaults of deepspeed/runtime/lr_schedules.py.
#include <algorithm>

#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

const std::vector<std::string> kSchedulers = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle"};

// A number, or a list of one number per parameter group (dsworker trains one group).
double per_group(Section& p, const char* key, double fallback) {
  const auto* v = p.get(key);
  if (v == nullptr) return fallback;
  if (!v->is_array()) return as_number(p, key, *v);
  if (v->size() != 1)
    p.fail(key, fmt::format("{} has {} values, one per parameter group; dsworker trains one group", show(*v),
                            v->size()));
  return as_number(p, key, (*v)[0]);
}

// A schedule restarted mid-way from the config is a resume; dsworker resumes from its checkpoints.
void fresh_start_only(Section& p) {
  auto t = p.optional_integer("last_batch_iteration");
  if (t && *t != -1)
    p.fail("last_batch_iteration",
           fmt::format("{} is not supported (only -1, a fresh start; dsworker resumes schedules from checkpoints)", *t));
}

WarmupType warmup_type(Section& p) {
  // DeepSpeed falls back to "log" with a warning on an unknown name; a typo silently changing the
  // warmup curve is an error here. (WarmupCosineLR would crash on it in DeepSpeed.)
  return p.choice("warmup_type", {"log", "linear"}, 0) == 0 ? WarmupType::log : WarmupType::linear;
}

int64_t warmup_steps(Section& p) {
  int64_t w = p.integer("warmup_num_steps", 1000);
  p.at_least("warmup_num_steps", static_cast<double>(w), 0);
  return w;
}

// DeepSpeed only warns when the warmup is longer than the whole schedule.
void warn_if_short(Section& p, int64_t total, int64_t warmup) {
  if (total < std::max<int64_t>(2, warmup))
    p.warn("total_num_steps", fmt::format("{} is less than warmup_num_steps {}", total, warmup));
}

WarmupParams parse_warmup(Section& p, bool decay) {
  WarmupParams w;
  w.warmup_min_lr = per_group(p, "warmup_min_lr", w.warmup_min_lr);
  w.warmup_max_lr = per_group(p, "warmup_max_lr", w.warmup_max_lr);
  w.warmup_num_steps = warmup_steps(p);
  w.warmup_type = warmup_type(p);
  fresh_start_only(p);
  std::optional<int64_t> total = decay ? p.optional_integer("total_num_steps") : std::nullopt;
  p.finish();
  if (decay) {
    if (!total) p.fail("total_num_steps", "missing (required by WarmupDecayLR)");
    p.at_least("total_num_steps", static_cast<double>(*total), 1);
    warn_if_short(p, *total, w.warmup_num_steps);
    w.total_num_steps = *total;
  }
  return w;
}

WarmupCosineParams parse_cosine(Section& p) {
  WarmupCosineParams c;
  auto total = p.optional_integer("total_num_steps");
  c.warmup_min_ratio = p.number("warmup_min_ratio", c.warmup_min_ratio);
  c.warmup_num_steps = warmup_steps(p);
  c.cos_min_ratio = p.number("cos_min_ratio", c.cos_min_ratio);
  c.warmup_type = warmup_type(p);
  fresh_start_only(p);
  p.finish();
  if (!total) p.fail("total_num_steps", "missing (required by WarmupCosineLR)");
  p.at_least("total_num_steps", static_cast<double>(*total), 1);
  int64_t warmup = std::max<int64_t>(2, c.warmup_num_steps);
  if (*total == warmup)  // the cosine phase has length total - warmup: DeepSpeed divides by zero
    p.fail("total_num_steps", fmt::format("{} equals the warmup length {}; the cosine phase would be empty",
                                          *total, warmup));
  warn_if_short(p, *total, c.warmup_num_steps);
  c.total_num_steps = *total;
  return c;
}

OneCycleParams parse_one_cycle(Section& p, const std::optional<OptimizerConfig>& optimizer) {
  OneCycleParams o;
  auto min_lr = p.optional_number("cycle_min_lr");
  auto max_lr = p.optional_number("cycle_max_lr");
  o.decay_lr_rate = p.number("decay_lr_rate", o.decay_lr_rate);
  o.cycle_first_step_size = p.number("cycle_first_step_size", o.cycle_first_step_size);
  p.greater_than("cycle_first_step_size", o.cycle_first_step_size, 0);
  o.cycle_second_step_size = p.number("cycle_second_step_size", o.cycle_first_step_size);
  p.greater_than("cycle_second_step_size", o.cycle_second_step_size, 0);
  for (const char* stairs : {"cycle_first_stair_count", "cycle_second_stair_count"})
    if (p.integer(stairs, 0) != 0) p.warn(stairs, "has no effect (DeepSpeed stores it but never uses it)");
  o.decay_step_size = p.number("decay_step_size", o.decay_step_size);
  p.at_least("decay_step_size", o.decay_step_size, 0);
  o.cycle_momentum = p.flag("cycle_momentum", o.cycle_momentum);
  o.cycle_min_mom = p.number("cycle_min_mom", o.cycle_min_mom);
  o.cycle_max_mom = p.number("cycle_max_mom", o.cycle_max_mom);
  o.decay_mom_rate = p.number("decay_mom_rate", o.decay_mom_rate);
  fresh_start_only(p);
  p.finish();
  if (!min_lr) p.fail("cycle_min_lr", "missing (required by OneCycle)");
  if (!max_lr) p.fail("cycle_max_lr", "missing (required by OneCycle)");
  o.cycle_min_lr = *min_lr;
  o.cycle_max_lr = *max_lr;
  // DeepSpeed cycles momentum through the optimizer's betas and disables it, with a warning, for
  // optimizers without betas (torch's SGD, Adagrad and RMSprop).
  const auto type = optimizer ? optimizer->type : OptimizerType::Adam;
  if (o.cycle_momentum &&
      (type == OptimizerType::SGD || type == OptimizerType::Adagrad || type == OptimizerType::RMSprop)) {
    p.warn("cycle_momentum", fmt::format("disabled: {} has no betas (as in DeepSpeed)", optimizer_type_name(type)));
    o.cycle_momentum = false;
  }
  return o;
}

}  // namespace

std::optional<SchedulerConfig> parse_scheduler(Section& top, const std::optional<OptimizerConfig>& optimizer) {
  if (!top.has("scheduler")) return std::nullopt;
  Section s = top.object("scheduler");
  Section p = s.object("params");
  auto name = s.optional_string("type");
  s.finish();
  if (!name) s.fail("type", "missing (one of WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle)");
  auto it = std::find(kSchedulers.begin(), kSchedulers.end(), *name);
  if (it == kSchedulers.end())
    s.fail("type", fmt::format("\"{}\" is not supported by dsworker (supported: WarmupLR, WarmupDecayLR, "
                               "WarmupCosineLR, OneCycle){}",
                               *name, did_you_mean(*name, kSchedulers)));
  SchedulerConfig c;
  c.type = static_cast<SchedulerType>(it - kSchedulers.begin());
  switch (c.type) {
    case SchedulerType::WarmupLR: c.params = parse_warmup(p, false); break;
    case SchedulerType::WarmupDecayLR: c.params = parse_warmup(p, true); break;
    case SchedulerType::WarmupCosineLR: c.params = parse_cosine(p); break;
    case SchedulerType::OneCycle: c.params = parse_one_cycle(p, optimizer); break;
  }
  return c;
}

}  // namespace ds::cfg
