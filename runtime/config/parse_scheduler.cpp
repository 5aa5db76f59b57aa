// The `scheduler` section: DeepSpeed's own schedules with the keyword arguments and defaults of
// deepspeed/runtime/lr_schedules.py, and the torch.optim.lr_scheduler classes DeepSpeed builds by name with
// torch's (names are case-sensitive, as DeepSpeed looks them up with getattr).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

// In SchedulerType's order.
const std::vector<std::string> kSchedulers = {"WarmupLR",      "WarmupDecayLR",     "WarmupCosineLR",
                                              "OneCycle",      "LRRangeTest",       "StepLR",
                                              "MultiStepLR",   "ConstantLR",        "LinearLR",
                                              "ExponentialLR", "PolynomialLR",      "CosineAnnealingLR",
                                              "CosineAnnealingWarmRestarts"};

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

LrRangeTestParams parse_range_test(Section& p) {
  LrRangeTestParams r;
  r.min_lr = per_group(p, "lr_range_test_min_lr", r.min_lr);
  r.step_size = p.integer("lr_range_test_step_size", r.step_size);
  p.greater_than("lr_range_test_step_size", static_cast<double>(r.step_size), 0);
  r.step_rate = p.number("lr_range_test_step_rate", r.step_rate);
  r.staircase = p.flag("lr_range_test_staircase", r.staircase);
  fresh_start_only(p);
  p.finish();
  return r;
}

// A key the torch class requires.
template <class T>
T required(Section& p, const char* key, std::optional<T> value, const std::string& type) {
  if (!value) p.fail(key, fmt::format("missing (required by {})", type));
  return *value;
}

// A factor torch checks to lie in [low, 1] (low excluded where `open`).
void factor_range(Section& p, const char* key, double value, bool open) {
  if (value > 1.0 || value < 0.0 || (open && value == 0.0))
    p.fail(key, fmt::format("{} must lie in {}0, 1] (as torch)", value, open ? "(" : "["));
}

// torch.optim.lr_scheduler's keyword arguments for `type` (torch's defaults and checks); last_epoch as
// DeepSpeed's last_batch_iteration (a fresh start only), verbose printing only.
TorchScheduleParams parse_torch_schedule(Section& p, SchedulerType type) {
  TorchScheduleParams t;
  const std::string name = kSchedulers[static_cast<size_t>(type)];
  switch (type) {
    case SchedulerType::StepLR:
      t.step_size = required(p, "step_size", p.optional_integer("step_size"), name);
      p.greater_than("step_size", static_cast<double>(t.step_size), 0);
      t.gamma = p.number("gamma", t.gamma);
      break;
    case SchedulerType::MultiStepLR: {
      const nlohmann::json* v = p.get("milestones");
      if (v == nullptr) p.fail("milestones", "missing (required by MultiStepLR)");
      if (!v->is_array()) p.type_error("milestones", *v, "a list of integers");
      for (const nlohmann::json& m : *v) t.milestones.push_back(as_integer(p, "milestones", m));
      std::sort(t.milestones.begin(), t.milestones.end());
      t.gamma = p.number("gamma", t.gamma);
      break;
    }
    case SchedulerType::ConstantLR:
      t.factor = p.number("factor", t.factor);
      factor_range(p, "factor", t.factor, false);
      t.total_iters = p.integer("total_iters", t.total_iters);
      p.at_least("total_iters", static_cast<double>(t.total_iters), 0);
      break;
    case SchedulerType::LinearLR:
      t.start_factor = p.number("start_factor", t.start_factor);
      factor_range(p, "start_factor", t.start_factor, true);
      t.end_factor = p.number("end_factor", t.end_factor);
      factor_range(p, "end_factor", t.end_factor, false);
      t.total_iters = p.integer("total_iters", t.total_iters);
      p.greater_than("total_iters", static_cast<double>(t.total_iters), 0);
      break;
    case SchedulerType::ExponentialLR: t.gamma = required(p, "gamma", p.optional_number("gamma"), name); break;
    case SchedulerType::PolynomialLR:
      t.total_iters = p.integer("total_iters", t.total_iters);
      p.greater_than("total_iters", static_cast<double>(t.total_iters), 0);
      t.power = p.number("power", t.power);
      break;
    case SchedulerType::CosineAnnealingLR:
      t.T_max = required(p, "T_max", p.optional_number("T_max"), name);
      p.greater_than("T_max", t.T_max, 0);
      t.eta_min = p.number("eta_min", t.eta_min);
      break;
    case SchedulerType::CosineAnnealingWarmRestarts:
      t.T_0 = required(p, "T_0", p.optional_integer("T_0"), name);
      p.greater_than("T_0", static_cast<double>(t.T_0), 0);
      t.T_mult = p.integer("T_mult", t.T_mult);
      p.at_least("T_mult", static_cast<double>(t.T_mult), 1);
      t.eta_min = p.number("eta_min", t.eta_min);
      break;
    default: throw std::logic_error("parse_torch_schedule: not a torch scheduler");
  }
  auto last_epoch = p.optional_integer("last_epoch");
  if (last_epoch && *last_epoch != -1)
    p.fail("last_epoch",
           fmt::format("{} is not supported (only -1, a fresh start; dsworker resumes schedules from checkpoints)",
                       *last_epoch));
  p.flag("verbose", false);
  p.finish();
  return t;
}

}  // namespace

std::optional<SchedulerConfig> parse_scheduler(Section& top, const std::optional<OptimizerConfig>& optimizer) {
  if (!top.has("scheduler")) return std::nullopt;
  Section s = top.object("scheduler");
  Section p = s.object("params");
  auto name = s.optional_string("type");
  s.finish();
  if (!name) s.fail("type", fmt::format("missing (one of {})", fmt::join(kSchedulers, ", ")));
  auto it = std::find(kSchedulers.begin(), kSchedulers.end(), *name);
  if (it == kSchedulers.end())
    s.fail("type", fmt::format("\"{}\" is not supported by dsworker (supported: {}){}", *name,
                               fmt::join(kSchedulers, ", "), did_you_mean(*name, kSchedulers)));
  SchedulerConfig c;
  c.type = static_cast<SchedulerType>(it - kSchedulers.begin());
  switch (c.type) {
    case SchedulerType::WarmupLR: c.params = parse_warmup(p, false); break;
    case SchedulerType::WarmupDecayLR: c.params = parse_warmup(p, true); break;
    case SchedulerType::WarmupCosineLR: c.params = parse_cosine(p); break;
    case SchedulerType::OneCycle: c.params = parse_one_cycle(p, optimizer); break;
    case SchedulerType::LRRangeTest: c.params = parse_range_test(p); break;
    default: c.params = parse_torch_schedule(p, c.type); break;
  }
  return c;
}

}  // namespace ds::cfg
