// The Hugging Face Trainer's "auto" values (transformers' integrations/deepspeed.py,
// HfTrainerDeepSpeedConfig): before DeepSpeed reads a config, the Trainer replaces "auto" with its own
// TrainingArguments. dsworker does the same from its flags (TrainerArgs) or the Trainer's defaults,
// so configs written for the Trainer run unchanged. Also: the optimizer a config without an
// optimizer section trains with. Every value chosen here is reported as a note.
//
// | key                                                    | "auto" becomes                                  |
// |--------------------------------------------------------|-------------------------------------------------|
// | train_micro_batch_size_per_gpu                         | --train_micro_batch_size_per_gpu, else 8        |
// | gradient_accumulation_steps                            | --gradient_accumulation_steps, else 1           |
// | train_batch_size                                       | world size x micro batch x accumulation         |
// | gradient_clipping                                      | 1.0 (the Trainer's max_grad_norm)               |
// | optimizer.params.lr / betas / eps / weight_decay       | --lr (5e-5) / [0.9, 0.999] / 1e-8 / --weight_decay (0) |
// | scheduler.params.warmup_min_lr / warmup_max_lr         | 0 / --lr (5e-5)                                 |
// | scheduler.params.warmup_num_steps / total_num_steps    | --warmup_steps (0) / the run's length           |
// | fp16.enabled / bf16.enabled                            | --fp16 / --bf16 (false)                         |
// | amp.enabled / amp.opt_level                            | false / "O1"                                    |
// | zero_optimization.reduce_bucket_size                   | h² (h: the model's hidden size)                 |
// | zero_optimization.stage3_prefetch_bucket_size          | int(0.9·h²), stage 3 only                       |
// | zero_optimization.stage3_param_persistence_threshold   | 10·h, stage 3 only                              |
//
// Where the Trainer compares a flag with a number written in the config (its "mismatch" error), so
// does dsworker, but only for flags given on the command line (the Trainer also compares with its
// defaults). A config with no batch size at all takes the Trainer's defaults (DeepSpeed refuses it).
#include <cmath>

#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

constexpr int64_t kMicroBatch = 8, kGradAccum = 1, kWarmupSteps = 0;
constexpr double kLr = 5e-5, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kWeightDecay = 0.0, kMaxGradNorm = 1.0;

bool is_auto(const nlohmann::json* v) { return v && v->is_string() && v->get_ref<const std::string&>() == "auto"; }

// A flag's value, or the Trainer's default; and how the note names its source.
template <typename T>
std::pair<T, std::string> from(const std::optional<T>& flag, const char* name, T fallback) {
  if (flag) return {*flag, fmt::format("from {}", name)};
  return {fallback, "the Hugging Face Trainer's default"};
}

class Filler {
 public:
  Filler(Context& ctx) : ctx_(ctx) {}

  // `parent[key]` = value when it is "auto", with a note. When it is a number and the flag that
  // would fill it was given with another value, that mismatch is an error (as the Trainer's).
  void fill(nlohmann::json* parent, const std::string& path, const char* key, const nlohmann::json& value,
            const std::string& source, bool flag_given = false) {
    if (parent == nullptr || !parent->is_object()) return;
    auto it = parent->find(key);
    if (it == parent->end()) return;
    const std::string at = path.empty() ? key : path + "." + key;
    if (is_auto(&*it)) {
      *it = value;
      ctx_.note(at, fmt::format("\"auto\" -> {} ({})", value.dump(), source));
    } else if (flag_given && !it->is_null() && *it != value &&
               !(it->is_number() && value.is_number() && it->get<double>() == value.get<double>())) {
      ctx_.error(at, fmt::format("{} in the config, but {} says {}; make them agree or write \"auto\"", it->dump(),
                                 source.substr(5), value.dump()));
    }
  }

 private:
  Context& ctx_;
};

nlohmann::json* child(nlohmann::json& parent, const char* key) {
  if (!parent.is_object()) return nullptr;
  auto it = parent.find(key);
  return it == parent.end() || !it->is_object() ? nullptr : &*it;
}

// A literal positive integer at `key`, if the config writes one (within int64: a larger one is left
// to the key's own check, which reports it; converting it was undefined behaviour, found by fuzzing).
std::optional<int64_t> literal(const nlohmann::json& parent, const char* key) {
  auto it = parent.find(key);
  if (it == parent.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!(v >= 1) || v != std::floor(v) || v >= 0x1p63) return std::nullopt;
  return static_cast<int64_t>(v);
}

void fill_batch(nlohmann::json& root, Context& ctx, int world_size, const TrainerArgs& args) {
  Filler f(ctx);
  auto [micro, micro_source] = from(args.micro_batch, "--train_micro_batch_size_per_gpu", kMicroBatch);
  auto [gas, gas_source] = from(args.grad_accum, "--gradient_accumulation_steps", kGradAccum);
  const char* kTrain = "train_batch_size";
  const char* kMicro = "train_micro_batch_size_per_gpu";
  const char* kGas = "gradient_accumulation_steps";
  auto given = [&](const char* key) {
    auto it = root.find(key);
    return it != root.end() && !it->is_null();
  };
  if (!given(kTrain) && !given(kMicro) && !given(kGas)) {
    root[kMicro] = micro;
    root[kGas] = gas;
    ctx.note(kMicro, fmt::format("no batch size in the config: {} ({})", micro, micro_source));
    ctx.note(kGas, fmt::format("no batch size in the config: {} ({})", gas, gas_source));
    return;
  }
  // The batch size "auto" becomes uses the config's own numbers where it has them.
  const int64_t micro_for_train = args.micro_batch ? micro : literal(root, kMicro).value_or(micro);
  const int64_t gas_for_train = args.grad_accum ? gas : literal(root, kGas).value_or(gas);
  f.fill(&root, "", kMicro, micro, micro_source, args.micro_batch.has_value());
  f.fill(&root, "", kGas, gas, gas_source, args.grad_accum.has_value());
  f.fill(&root, "", kTrain, micro_for_train * gas_for_train * world_size,
         fmt::format("world size {} x micro batch {} x accumulation {}", world_size, micro_for_train, gas_for_train));
}

// The ZeRO sizes the Trainer derives from the model's hidden size h.
void fill_zero(nlohmann::json& root, Context& ctx, const TrainerArgs& args) {
  nlohmann::json* z = child(root, "zero_optimization");
  if (z == nullptr) return;
  const char* kReduce = "reduce_bucket_size";
  const char* kPrefetch = "stage3_prefetch_bucket_size";
  const char* kPersist = "stage3_param_persistence_threshold";
  auto has_auto = [&](const char* key) { return z->contains(key) && is_auto(&(*z)[key]); };
  if (!has_auto(kReduce) && !has_auto(kPrefetch) && !has_auto(kPersist)) return;
  std::optional<int64_t> h;
  if (args.hidden_size) h = args.hidden_size(root.contains("model") ? root["model"] : nlohmann::json::object());
  if (!h) {
    for (const char* key : {kReduce, kPrefetch, kPersist})
      if (has_auto(key))
        ctx.warn(std::string("zero_optimization.") + key,
                 "\"auto\" needs the model's hidden size (give --model); DeepSpeed's default applies");
    return;  // the section drops "auto", as DeepSpeed does
  }
  const auto stage = literal(*z, "stage").value_or(0);
  Filler f(ctx);
  const std::string source = fmt::format("the model's hidden size {}", *h);
  f.fill(z, "zero_optimization", kReduce, *h * *h, source + " squared");
  if (stage == 3) {
    f.fill(z, "zero_optimization", kPrefetch, static_cast<int64_t>(0.9 * static_cast<double>(*h * *h)),
           "0.9 x " + source + " squared");
    f.fill(z, "zero_optimization", kPersist, 10 * *h, "10 x " + source);
  }
}

}  // namespace

bool resolve_auto(nlohmann::json& root, Context& ctx, int world_size, const TrainerArgs& args) {
  Filler f(ctx);
  fill_batch(root, ctx, world_size, args);
  f.fill(&root, "", "gradient_clipping", kMaxGradNorm, "the Hugging Face Trainer's max_grad_norm default");

  auto [lr, lr_source] = from(args.lr, "--lr", kLr);
  auto [wd, wd_source] = from(args.weight_decay, "--weight_decay", kWeightDecay);
  if (nlohmann::json* optimizer = child(root, "optimizer")) {
    nlohmann::json* p = child(*optimizer, "params");
    f.fill(p, "optimizer.params", "lr", lr, lr_source, args.lr.has_value());
    f.fill(p, "optimizer.params", "betas", {kBeta1, kBeta2}, "the Hugging Face Trainer's default");
    f.fill(p, "optimizer.params", "eps", kEps, "the Hugging Face Trainer's default");
    f.fill(p, "optimizer.params", "weight_decay", wd, wd_source, args.weight_decay.has_value());
  }

  bool total_unknown = false;
  if (nlohmann::json* scheduler = child(root, "scheduler")) {
    nlohmann::json* p = child(*scheduler, "params");
    auto [warmup, warmup_source] = from(args.warmup_steps, "--warmup_steps", kWarmupSteps);
    f.fill(p, "scheduler.params", "warmup_min_lr", 0.0, "the Hugging Face Trainer's value");
    f.fill(p, "scheduler.params", "warmup_max_lr", lr, lr_source, args.lr.has_value());
    f.fill(p, "scheduler.params", "warmup_num_steps", warmup, warmup_source, args.warmup_steps.has_value());
    if (p && p->contains("total_num_steps") && is_auto(&(*p)["total_num_steps"])) {
      total_unknown = !args.total_steps;
      f.fill(p, "scheduler.params", "total_num_steps", args.total_steps.value_or(1),
             args.total_steps ? "the run's length, --steps" : "the run's length, set when training starts");
    }
  }

  f.fill(child(root, "fp16"), "fp16", "enabled", args.fp16, args.fp16 ? "from --fp16" : "no --fp16", args.fp16);
  f.fill(child(root, "bf16"), "bf16", "enabled", args.bf16, args.bf16 ? "from --bf16" : "no --bf16", args.bf16);
  f.fill(child(root, "amp"), "amp", "enabled", false, "the Trainer's fp16_backend is not apex");
  f.fill(child(root, "amp"), "amp", "opt_level", "O1", "the Hugging Face Trainer's default");
  fill_zero(root, ctx, args);
  return total_unknown;
}

OptimizerConfig default_optimizer(const nlohmann::json& root, Context& ctx, const TrainerArgs& args) {
  OptimizerConfig o;
  o.type = OptimizerType::AdamW;
  AdamParams a;
  a.weight_decay = args.weight_decay.value_or(0.01);  // torch.optim.AdamW's default
  o.params = a;
  std::string source = "torch.optim.AdamW's default";
  o.lr = 1e-3;
  const nlohmann::json* peak = nullptr;
  if (root.contains("scheduler") && root["scheduler"].is_object() && root["scheduler"].contains("params") &&
      root["scheduler"]["params"].is_object()) {
    const auto& p = root["scheduler"]["params"];
    for (const char* key : {"warmup_max_lr", "cycle_max_lr"})
      if (p.contains(key) && p[key].is_number()) {
        peak = &p[key];
        source = fmt::format("the scheduler's {}", key);
        break;
      }
  }
  if (args.lr) {
    o.lr = *args.lr;
    source = "--lr";
  } else if (peak) {
    o.lr = peak->get<double>();
  }
  ctx.note("optimizer",
           fmt::format("no optimizer section: AdamW with lr {} ({}), betas [0.9, 0.999], eps 1e-08, weight_decay {} "
                       "({}); write an optimizer section to choose another",
                       o.lr, source, a.weight_decay,
                       args.weight_decay ? "--weight_decay" : "torch.optim.AdamW's default"));
  return o;
}

}  // namespace ds::cfg
