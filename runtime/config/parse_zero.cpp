// The `zero_optimization` section (deepspeed/runtime/zero/config.py, offload_config.py): every key
// with DeepSpeed's code defaults, the `stage3_*` aliases, and the deprecated spellings DeepSpeed still
// converts (a bare boolean, cpu_offload, cpu_offload_param, stage3_gather_fp16_weights_on_model_save).
#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

// A key with an alternative spelling; both given is an error (pydantic would silently pick one).
std::optional<std::string> spelling(Section& z, const char* name, const char* alias) {
  bool a = z.has(name), b = z.has(alias);
  if (a && b) z.fail(alias, fmt::format("given together with '{}'; keep one", name));
  if (a) return name;
  if (b) return alias;
  return std::nullopt;
}

int64_t count(Section& z, const char* name, const char* alias, int64_t fallback, int64_t min = 0) {
  auto key = alias ? spelling(z, name, alias) : std::optional<std::string>(name);
  int64_t v = key ? z.integer(*key, fallback) : fallback;
  if (key) z.at_least(*key, static_cast<double>(v), static_cast<double>(min));
  return v;
}

bool flag(Section& z, const char* name, const char* alias, bool fallback) {
  auto key = spelling(z, name, alias);
  return key ? z.flag(*key, fallback) : fallback;
}

OffloadDevice device(Section& o) {
  return static_cast<OffloadDevice>(o.choice("device", {"none", "cpu", "nvme"}, 0));
}

OffloadParamConfig parse_offload_param(Section& o) {
  OffloadParamConfig c;
  c.device = device(o);
  c.nvme_path = o.optional_string("nvme_path");
  c.buffer_count = count(o, "buffer_count", nullptr, c.buffer_count);
  c.buffer_size = count(o, "buffer_size", nullptr, c.buffer_size);
  c.max_in_cpu = count(o, "max_in_cpu", nullptr, c.max_in_cpu);
  c.pin_memory = o.flag("pin_memory", c.pin_memory);
  o.finish();
  return c;
}

OffloadOptimizerConfig parse_offload_optimizer(Section& o) {
  OffloadOptimizerConfig c;
  c.device = device(o);
  c.nvme_path = o.optional_string("nvme_path");
  c.buffer_count = count(o, "buffer_count", nullptr, c.buffer_count);
  c.pin_memory = o.flag("pin_memory", c.pin_memory);
  c.pipeline_read = o.flag("pipeline_read", c.pipeline_read);
  c.pipeline_write = o.flag("pipeline_write", c.pipeline_write);
  c.fast_init = o.flag("fast_init", c.fast_init);
  if (o.flag("super_offload", false)) o.error("super_offload", "true is not supported by dsworker (SuperOffload)");
  o.number("cpuadam_cores_perc", 0.8);  // DeepSpeedCPUAdam's share of the cores; dsworker uses OMP_NUM_THREADS
  c.ratio = o.number("ratio", c.ratio);
  o.at_least("ratio", c.ratio, 0.0);
  if (c.ratio > 1.0) o.fail("ratio", fmt::format("{} must be <= 1", c.ratio));
  o.finish();
  return c;
}

// Deprecated `cpu_offload: true` / `cpu_offload_param: true`: the block with device cpu.
template <typename Offload>
std::optional<Offload> offload(Section& z, const char* key, const char* legacy, Offload (*parse)(Section&)) {
  bool legacy_given = z.has(legacy);
  bool legacy_on = z.flag(legacy, false);
  if (legacy_given) z.warn(legacy, fmt::format("deprecated; use {}", key));
  if (z.has(key)) {
    if (legacy_given) z.fail(legacy, fmt::format("given together with '{}'; keep one", key));
    Section o = z.object(key);
    return parse(o);
  }
  if (!legacy_on) return std::nullopt;
  Offload c;
  c.device = OffloadDevice::cpu;
  return c;
}

int parse_stage(Section& z) {
  const auto* v = z.get("stage");
  if (v == nullptr) return 0;
  int64_t stage = as_integer(z, "stage", *v);
  if (stage < 0 || stage > 3) z.fail("stage", fmt::format("{} is not one of 0, 1, 2, 3", show(*v)));
  return static_cast<int>(stage);
}

}  // namespace

ZeroConfig parse_zero(Section& top) {
  ZeroConfig c;
  // Legacy: `"zero_optimization": true` is stage 1 with the top-level allgather_size.
  int64_t allgather_size = top.integer("allgather_size", c.allgather_bucket_size);
  const auto* legacy = top.get("zero_optimization");
  if (legacy != nullptr && legacy->is_boolean()) {
    top.warn("zero_optimization", "a boolean is deprecated; use {\"stage\": N}");
    c.stage = legacy->get<bool>() ? 1 : 0;
    c.allgather_bucket_size = allgather_size;
    return c;
  }

  Section z(top.context(), legacy, "zero_optimization", /*drop_auto=*/true);  // a pydantic model
  c.stage = parse_stage(z);
  c.contiguous_gradients = z.flag("contiguous_gradients", c.contiguous_gradients);
  c.reduce_scatter = z.flag("reduce_scatter", c.reduce_scatter);
  c.reduce_bucket_size = count(z, "reduce_bucket_size", nullptr, c.reduce_bucket_size, 1);  // > 0 since 0.19.8
  c.use_multi_rank_bucket_allreduce = z.flag("use_multi_rank_bucket_allreduce", c.use_multi_rank_bucket_allreduce);
  c.allgather_partitions = z.flag("allgather_partitions", c.allgather_partitions);
  c.allgather_bucket_size = count(z, "allgather_bucket_size", nullptr, c.allgather_bucket_size);
  auto overlap = z.get("overlap_comm") ? std::optional<bool>(z.flag("overlap_comm", false)) : std::nullopt;
  c.overlap_comm = overlap.value_or(c.stage == 3);
  c.load_from_fp32_weights = z.flag("load_from_fp32_weights", c.load_from_fp32_weights);
  c.elastic_checkpoint = z.flag("elastic_checkpoint", c.elastic_checkpoint);
  c.offload_param = offload<OffloadParamConfig>(z, "offload_param", "cpu_offload_param", parse_offload_param);
  c.offload_optimizer =
      offload<OffloadOptimizerConfig>(z, "offload_optimizer", "cpu_offload", parse_offload_optimizer);
  if (z.has("cpu_offload_use_pin_memory")) {
    z.flag("cpu_offload_use_pin_memory", false);
    z.warn("cpu_offload_use_pin_memory", "deprecated and has no effect (as in DeepSpeed); use offload_*.pin_memory");
  }
  c.sub_group_size = count(z, "sub_group_size", nullptr, c.sub_group_size);
  c.prefetch_bucket_size = count(z, "prefetch_bucket_size", "stage3_prefetch_bucket_size", c.prefetch_bucket_size);
  c.param_persistence_threshold =
      count(z, "param_persistence_threshold", "stage3_param_persistence_threshold", c.param_persistence_threshold);
  c.model_persistence_threshold =
      count(z, "model_persistence_threshold", "stage3_model_persistence_threshold", c.model_persistence_threshold);
  c.max_live_parameters = count(z, "max_live_parameters", "stage3_max_live_parameters", c.max_live_parameters);
  c.max_reuse_distance = count(z, "max_reuse_distance", "stage3_max_reuse_distance", c.max_reuse_distance);
  if (z.has("stage3_gather_fp16_weights_on_model_save")) {
    if (z.has("stage3_gather_16bit_weights_on_model_save") || z.has("gather_16bit_weights_on_model_save"))
      z.fail("stage3_gather_fp16_weights_on_model_save", "given together with its new name; keep one");
    z.warn("stage3_gather_fp16_weights_on_model_save", "deprecated; use stage3_gather_16bit_weights_on_model_save");
    c.gather_16bit_weights_on_model_save = z.flag("stage3_gather_fp16_weights_on_model_save", false);
  } else {
    c.gather_16bit_weights_on_model_save = flag(z, "gather_16bit_weights_on_model_save",
                                                "stage3_gather_16bit_weights_on_model_save", false);
  }
  c.module_granularity_threshold = count(z, "module_granularity_threshold", "stage3_module_granularity_threshold",
                                         c.module_granularity_threshold);
  c.use_all_reduce_for_fetch_params = flag(z, "use_all_reduce_for_fetch_params",
                                           "stage3_use_all_reduce_for_fetch_params", c.use_all_reduce_for_fetch_params);
  c.ignore_unused_parameters = z.flag("ignore_unused_parameters", c.ignore_unused_parameters);
  // Speed and debugging switches of DeepSpeed's ZeRO-3 hooks, which dsworker's per-layer gathering
  // does not have: accepted, no effect.
  flag(z, "allgather_sequential", "stage3_allgather_sequential", false);
  z.flag("enable_sanity_checks", false);
  z.flag("parameter_alignment", false);  // dsworker's partitions are aligned whatever this says
  // DeepSpeed 0.19.8 can skip the gradient norm at stages 1-2 when nothing needs it; dsworker always
  // computes it (one 8-byte all-reduce), but refuses what DeepSpeed refuses.
  if (!z.flag("compute_grad_norm", true) && c.stage != 1 && c.stage != 2)
    z.error("compute_grad_norm", fmt::format("false is supported only with ZeRO stage 1 or 2 (stage is {})", c.stage));
  z.flag("save_muon_momentum_buffer_in_memory", false);
  if (z.has("leaf_module")) {
    z.object("leaf_module");  // {classes, names, name_suffixes}: torch module names
    z.warn("leaf_module", "ignored: dsworker gathers ZeRO-3 parameters per plugin layer, which is already a leaf");
  }
  if (z.has("zenflow")) z.error("zenflow", "not supported by dsworker (ZenFlow stall-free offloading)");
  if (z.flag("legacy_stage1", false)) z.fail("legacy_stage1", "true is not supported (removed from DeepSpeed)");
  c.round_robin_gradients = z.flag("round_robin_gradients", c.round_robin_gradients);
  c.zero_hpz_partition_size = count(z, "zero_hpz_partition_size", nullptr, c.zero_hpz_partition_size, 1);
  c.zero_quantized_weights = z.flag("zero_quantized_weights", c.zero_quantized_weights);
  c.zero_quantized_nontrainable_weights =
      z.flag("zero_quantized_nontrainable_weights", c.zero_quantized_nontrainable_weights);
  c.zero_quantized_gradients = z.flag("zero_quantized_gradients", c.zero_quantized_gradients);
  if (z.has("zeropp_loco_param")) {
    Section l = z.object("zeropp_loco_param");
    ZeroPpLocoConfig loco;
    loco.err_beta = l.number("err_beta", loco.err_beta);
    loco.reset_T = count(l, "reset_T", nullptr, loco.reset_T);
    l.finish();
    c.zeropp_loco_param = loco;
  }
  c.mics_shard_size = z.integer("mics_shard_size", c.mics_shard_size);
  c.mics_hierarchical_params_gather = z.flag("mics_hierarchical_params_gather", c.mics_hierarchical_params_gather);
  c.memory_efficient_linear = z.flag("memory_efficient_linear", c.memory_efficient_linear);
  c.pipeline_loading_checkpoint = z.flag("pipeline_loading_checkpoint", c.pipeline_loading_checkpoint);
  c.override_module_apply = z.flag("override_module_apply", c.override_module_apply);
  c.log_trace_cache_warnings = z.flag("log_trace_cache_warnings", c.log_trace_cache_warnings);
  z.finish();

  if (c.offload_optimizer && c.offload_optimizer->ratio < 1.0 && c.stage != 3)
    z.fail("offload_optimizer.ratio", fmt::format("{} < 1 requires stage 3 (stage is {})", c.offload_optimizer->ratio,
                                                  c.stage));
  return c;
}

}  // namespace ds::cfg
