// The top level: scalar keys, the sections, foreign keys, then the cross-key resolutions — the batch
// triad (DeepSpeed's integer rules, reference §2.2), fp16/bf16 exclusion and the dtype defaults.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

using Entry = std::pair<const char*, std::optional<int64_t>>;

// Resolves train = micro × gas × world exactly as DeepSpeed's _set_batch_related_parameters and
// _batch_assertion do, with messages that name the keys and show how a value was derived. Given
// values must be positive up front (DeepSpeed would divide by a zero micro batch), so C++ division
// is Python's floor division here.
void resolve_triad(Context& ctx, DsConfig& c, std::optional<int64_t> train, std::optional<int64_t> micro,
                   std::optional<int64_t> gas) {
  const int64_t dp = c.world_size;
  std::string ranks = fmt::format("world_size {}", dp);
  std::string divisors;  // the ranks that are not data-parallel
  if (c.pipeline.stages > 1) divisors += fmt::format(" / pipeline.stages {}", c.pipeline.stages);
  if (c.tensor_parallel.autotp_size > 1) divisors += fmt::format(" / tensor_parallel.autotp_size {}", c.tensor_parallel.autotp_size);
  if (c.sequence_parallel_size > 1) divisors += fmt::format(" / sequence_parallel_size {}", c.sequence_parallel_size);
  if (!divisors.empty()) ranks = fmt::format("data-parallel size {} (world size{})", dp, divisors);
  const char* kTrain = "train_batch_size";
  const char* kMicro = "train_micro_batch_size_per_gpu";
  const char* kGas = "gradient_accumulation_steps";
  for (auto [key, v] : std::initializer_list<Entry>{{kTrain, train}, {kMicro, micro}, {kGas, gas}})
    if (v && *v <= 0) ctx.fail(key, fmt::format("{} must be > 0", *v));

  std::string derived;  // how the missing value(s) were computed, for messages
  if (train && micro && gas) {
  } else if (train && micro) {
    gas = *train / *micro / dp;
    derived = fmt::format("{} derived as {} // {} // {}", kGas, *train, *micro, ranks);
  } else if (train && gas) {
    micro = *train / dp / *gas;
    derived = fmt::format("{} derived as {} // {} // {}", kMicro, *train, ranks, *gas);
  } else if (micro && gas) {
    train = *micro * *gas * dp;
    derived = fmt::format("{} derived as {} * {} * {}", kTrain, *micro, *gas, ranks);
  } else if (train) {
    gas = 1;
    micro = *train / dp;
    derived = fmt::format("{} derived as 1 and {} as {} // {}", kGas, kMicro, *train, ranks);
  } else if (micro) {
    gas = 1;
    train = *micro * dp;
    derived = fmt::format("{} derived as 1 and {} as {} * {}", kGas, kTrain, *micro, ranks);
  } else {
    ctx.fail("", fmt::format("either {} or {} must be given", kTrain, kMicro));
  }

  for (auto [key, v] : std::initializer_list<Entry>{{kTrain, train}, {kMicro, micro}, {kGas, gas}})
    if (*v <= 0) ctx.fail(key, fmt::format("{} must be > 0 ({})", *v, derived));
  if (*train != *micro * *gas * dp)
    ctx.fail(kTrain, fmt::format("{} != {} {} * {} {} * {} = {}{}", *train, kMicro, *micro, kGas, *gas,
                                 ranks, *micro * *gas * dp, derived.empty() ? "" : " (" + derived + ")"));
  c.train_batch_size = *train;
  c.train_micro_batch_size_per_gpu = *micro;
  c.gradient_accumulation_steps = *gas;
}

const std::vector<std::string> kDtypes = {"fp32", "fp16", "bf16"};

std::optional<Dtype> optional_dtype(Section& s, const char* key, bool ignore_case) {
  if (!s.has(key)) return std::nullopt;
  return static_cast<Dtype>(s.choice(key, kDtypes, 0, ignore_case));
}

// fp16 and bf16 exclude each other; torch_autocast selects one of them (dsworker's 16-bit compute
// is what autocast asks for: matmuls and activations in 16 bits, fp32 master weights).
void resolve_precision(Context& ctx, DsConfig& c) {
  if (c.fp16.enabled && c.bf16.enabled) ctx.fail("bf16.enabled", "fp16 and bf16 cannot both be enabled");
  if (!c.torch_autocast.enabled) return;
  if (c.fp16.enabled || c.bf16.enabled)
    ctx.fail("torch_autocast.enabled",
             fmt::format("true cannot be combined with {}.enabled (DeepSpeed refuses it too)", c.fp16.enabled ? "fp16" : "bf16"));
  if (c.torch_autocast.dtype == Dtype::fp16) {
    c.fp16.enabled = true;  // with DeepSpeed's default dynamic loss scaling
  } else {
    c.bf16.enabled = true;
  }
  ctx.note("torch_autocast", fmt::format("enabled: computes in {} with fp32 master weights ({}.enabled)",
                                         dtype_name(c.torch_autocast.dtype), dtype_name(c.torch_autocast.dtype)));
}

// DeepSpeed's rules for bf16 master weights and optimizer states (runtime/config.py), and what
// dsworker needs beside them: bf16 training and gradients kept in fp32 or bf16.
void check_bf16_master(Context& ctx, const DsConfig& c) {
  const Bf16Config& b = c.bf16;
  const int stage = c.zero_optimization.stage;
  for (auto [key, on] : {std::pair{"bf16.bf16_master_weights_and_grads", b.master_weights_and_grads},
                         std::pair{"bf16.bf16_optimizer_states", b.optimizer_states}}) {
    if (!on) continue;
    if (!b.enabled) ctx.error(key, "true needs bf16.enabled true");
    else if (stage == 0) ctx.error(key, "true is only supported with ZeRO stage 1, 2 or 3 (as in DeepSpeed), not stage 0");
  }
  if (b.optimizer_states && !b.master_weights_and_grads)
    ctx.error("bf16.bf16_optimizer_states", "true needs bf16.bf16_master_weights_and_grads true (as in DeepSpeed)");
  if (b.master_weights_and_grads && c.grad_accum_dtype == Dtype::fp16)
    ctx.error("data_types.grad_accum_dtype", "\"fp16\" cannot hold the gradients of bf16 master weights; use bf16 or fp32");
}

nlohmann::json free_object(Section& top, const char* key) {
  const auto* v = top.get(key);
  if (v == nullptr) return nlohmann::json::object();
  if (!v->is_object()) top.type_error(key, *v, "an object");
  return *v;
}

}  // namespace

DsConfig parse_in(const nlohmann::json& file_root, Context& ctx, int world_size, const TrainerArgs& args) {
  if (world_size < 1) throw std::invalid_argument(fmt::format("parse_config: world_size {} < 1", world_size));
  if (!file_root.is_object()) {
    ctx.error("", fmt::format("the top level must be an object, not {}", file_root.type_name()));
    throw ConfigErrors(ctx.errors, ctx.warnings);
  }
  DsConfig c;
  c.origin = ctx.name;
  const int64_t model_ranks = cfg::peek_model_parallel_size(file_root);
  c.world_size = world_size % model_ranks == 0 ? static_cast<int>(world_size / model_ranks) : world_size;  // data-parallel
  nlohmann::json root = file_root;
  c.scheduler_total_steps_auto = resolve_auto(root, ctx, c.world_size, args);
  Section top(ctx, &root, "");

  const size_t errors_before_triad = ctx.errors.size();
  auto train = top.optional_integer("train_batch_size");
  auto micro = top.optional_integer("train_micro_batch_size_per_gpu");
  auto gas = top.optional_integer("gradient_accumulation_steps");
  const bool triad_readable = ctx.errors.size() == errors_before_triad;  // else resolving it only repeats that
  c.steps_per_print = top.optional_integer("steps_per_print");
  if (c.steps_per_print) top.at_least("steps_per_print", static_cast<double>(*c.steps_per_print), 1);
  c.wall_clock_breakdown = top.flag("wall_clock_breakdown", c.wall_clock_breakdown);
  c.memory_breakdown = top.flag("memory_breakdown", c.memory_breakdown);
  int64_t seed = top.integer("seed", static_cast<int64_t>(c.seed));
  top.at_least("seed", static_cast<double>(seed), 0);
  c.seed = static_cast<uint64_t>(seed);
  c.gradient_clipping = top.number("gradient_clipping", c.gradient_clipping);
  top.at_least("gradient_clipping", c.gradient_clipping, 0.0);
  c.prescale_gradients = top.flag("prescale_gradients", c.prescale_gradients);
  c.gradient_predivide_factor = top.number("gradient_predivide_factor", c.gradient_predivide_factor);
  top.greater_than("gradient_predivide_factor", c.gradient_predivide_factor, 0.0);
  std::optional<Dtype> comm_dtype, grad_accum_dtype, param_dtype;
  guard([&] { comm_dtype = optional_dtype(top, "communication_data_type", /*ignore_case=*/true); });
  c.dataloader_drop_last = top.flag("dataloader_drop_last", c.dataloader_drop_last);
  c.zero_allow_untested_optimizer = top.flag("zero_allow_untested_optimizer", c.zero_allow_untested_optimizer);

  std::optional<OptimizerConfig> optimizer;
  guard([&] { optimizer = parse_optimizer(top); });
  if (!top.has("optimizer")) optimizer = default_optimizer(root, ctx, args);
  if (optimizer) c.optimizer = *optimizer;
  guard([&] { c.scheduler = parse_scheduler(top, optimizer); });
  guard([&] { c.fp16 = parse_fp16(top); });
  guard([&] { c.bf16 = parse_bf16(top); });
  guard([&] { c.torch_autocast = parse_torch_autocast(top); });
  guard([&] {
    Section data_types = top.object("data_types");
    grad_accum_dtype = optional_dtype(data_types, "grad_accum_dtype", /*ignore_case=*/false);
    param_dtype = optional_dtype(data_types, "param_dtype", /*ignore_case=*/false);
    if (data_types.has("buffer_dtype")) {
      optional_dtype(data_types, "buffer_dtype", /*ignore_case=*/false);
      data_types.warn("buffer_dtype", "ignored: dsworker's plugin layers hold no buffers");
    }
    data_types.finish();
  });
  guard([&] { c.zero_optimization = parse_zero(top); });
  guard([&] { c.aio = parse_aio(top); });
  guard([&] { c.comms_logger = parse_comms_logger(top); });
  guard([&] { c.csv_monitor = parse_monitor(top, "csv_monitor"); });
  guard([&] { c.tensorboard = parse_monitor(top, "tensorboard"); });
  guard([&] { c.activation_checkpointing = parse_activation_checkpointing(top); });
  guard([&] { c.pipeline = parse_pipeline(top, world_size); });
  guard([&] { c.tensor_parallel = parse_tensor_parallel(top); });
  guard([&] {
    const int64_t size = top.integer("sequence_parallel_size", 1);
    top.at_least("sequence_parallel_size", static_cast<double>(size), 1);
    c.sequence_parallel_size = std::max<int64_t>(size, 1);
  });
  check_model_parallel_sizes(ctx, c, world_size);
  guard([&] { c.checkpoint = parse_checkpoint(top); });
  guard([&] { c.model = free_object(top, "model"); });
  guard([&] { c.data = free_object(top, "data"); });
  guard([&] { c.sample = free_object(top, "sample"); });
  check_foreign_keys(top);
  top.finish(/*warn_only=*/true);  // DeepSpeed reads the top-level keys it knows and ignores the rest

  if (triad_readable) guard([&] { resolve_triad(ctx, c, train, micro, gas); });
  guard([&] { resolve_precision(ctx, c); });
  // DeepSpeed's engine.get_data_types: bf16 without ZeRO accumulates in fp32.
  bool bf16_no_zero = c.bf16.enabled && c.zero_optimization.stage == 0;
  c.grad_accum_dtype = grad_accum_dtype.value_or(bf16_no_zero ? Dtype::fp32 : c.model_dtype());
  if (param_dtype && *param_dtype != c.model_dtype())  // DeepSpeed's engine asserts the same
    ctx.error("data_types.param_dtype", fmt::format("\"{}\" differs from the model's precision {} (fp16/bf16.enabled)",
                                                    dtype_name(*param_dtype), dtype_name(c.model_dtype())));
  // Gradients are reduced in the type they accumulate in (DeepSpeed: the model dtype, but its
  // BF16_Optimizer reduces its fp32 accumulators in fp32 too).
  c.communication_data_type = comm_dtype.value_or(c.grad_accum_dtype);
  check_bf16_master(ctx, c);
  check_support(c, ctx);
  guard([&] { check_optimizer_fits(ctx, c); });
  c.warnings = ctx.warnings;
  c.notes = ctx.notes;
  if (!ctx.errors.empty()) throw ConfigErrors(ctx.errors, ctx.warnings);
  return c;
}

}  // namespace ds::cfg

namespace ds {

std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return "fp32";
    case Dtype::fp16: return "fp16";
    case Dtype::bf16: return "bf16";
  }
  return "?";
}

Dtype DsConfig::model_dtype() const {
  return fp16.enabled ? Dtype::fp16 : bf16.enabled ? Dtype::bf16 : Dtype::fp32;
}

DsConfig parse_config(const nlohmann::json& root, const std::string& origin, int world_size, const TrainerArgs& args) {
  cfg::Context ctx{origin, {}, {}, {}, {}};
  return cfg::parse_in(root, ctx, world_size, args);
}

namespace {
std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += (out.empty() ? "" : "\n") + line;
  return out;
}
}  // namespace

ConfigErrors::ConfigErrors(std::vector<std::string> errors_in, std::vector<std::string> warnings_in)
    : ConfigError(join_lines(errors_in)), errors(std::move(errors_in)), warnings(std::move(warnings_in)) {}

}  // namespace ds
