// What dsworker does not implement among the settings a valid config can ask for: refused with an
// error naming the key and its value (never silently ignored), so `--print_config` reports every
// refusal training would give. Settings that mean nothing on CPU ranks are accepted with a note.
#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

// ZeRO-Infinity's optimizer offload: the moments (and an fp32 master copy) stream through swap
// buffers sub-group by sub-group, so the optimizer must be element-wise; DeepSpeed requires its CPU
// Adam (or Adagrad, Lion) for the same reason.
void check_nvme_optimizer(const DsConfig& c, Context& ctx) {
  const OffloadOptimizerConfig& o = *c.zero_optimization.offload_optimizer;
  const std::string key = "zero_optimization.offload_optimizer";
  if (c.zero_optimization.stage == 0) {
    ctx.warn(key, "ignored at ZeRO stage 0, as DeepSpeed ignores it");
    return;
  }
  if (!o.nvme_path || o.nvme_path->empty())
    ctx.error(key + ".nvme_path", "required with device \"nvme\": the directory for the swap files");
  const OptimizerType t = c.optimizer.type;
  if (t != OptimizerType::Adam && t != OptimizerType::AdamW && t != OptimizerType::Adagrad &&
      t != OptimizerType::RMSprop && t != OptimizerType::SGD && t != OptimizerType::Lion)
    ctx.error(key + ".device", fmt::format("\"nvme\" streams the optimizer state sub-group by sub-group, which needs an "
                                           "element-wise optimizer (Adam, AdamW, Adagrad, RMSprop, SGD or Lion), not {}",
                                           optimizer_type_name(t)));
  if (c.zero_optimization.stage < 3)
    ctx.note(key, "device \"nvme\" at ZeRO stage 1-2: dsworker offloads the optimizer state to nvme_path (DeepSpeed "
                  "treats it as \"cpu\" below stage 3)");
  if (o.ratio < 1.0) ctx.warn(key + ".ratio", "ignored: every sub-group is updated on the CPU ranks");
}

// ZeRO-Infinity's parameter offload: stage 3 only, as DeepSpeed (which ignores it below); the fp32
// master copy is kept apart from the swapped parameters, which bf16 master weights do without.
void check_nvme_params(const DsConfig& c, Context& ctx) {
  const OffloadParamConfig& o = *c.zero_optimization.offload_param;
  const std::string key = "zero_optimization.offload_param";
  if (c.zero_optimization.stage != 3) {
    ctx.warn(key, fmt::format("ignored at ZeRO stage {}, as DeepSpeed ignores it (parameters are offloaded at stage 3 "
                              "only)", c.zero_optimization.stage));
    return;
  }
  if (!o.nvme_path || o.nvme_path->empty())
    ctx.error(key + ".nvme_path", "required with device \"nvme\": the directory for the parameters' swap file");
  if (o.buffer_count < 1) ctx.error(key + ".buffer_count", fmt::format("{} must be at least 1", o.buffer_count));
  if (c.bf16.enabled && c.bf16.master_weights_and_grads)
    ctx.error(key + ".device", "\"nvme\" keeps an fp32 master copy apart from the swapped parameters, which "
                               "bf16.bf16_master_weights_and_grads does without; use one or the other");
}

}  // namespace

void check_support(const DsConfig& c, Context& ctx) {
  if (c.communication_data_type != c.grad_accum_dtype)
    ctx.error("communication_data_type",
              fmt::format("{}: gradients are reduced in the type they accumulate in (data_types.grad_accum_dtype, "
                          "here {}); another type is not implemented",
                          dtype_name(c.communication_data_type), dtype_name(c.grad_accum_dtype)));
  const ZeroConfig& z = c.zero_optimization;
  auto refuse = [&](const std::string& key, const std::string& value, const char* what) {
    ctx.error("zero_optimization." + key, fmt::format("{}: {} is not implemented yet", value, what));
  };
  // ZeRO-Offload to the CPU: dsworker's ranks are CPU processes, so the optimizer state (and the
  // parameters) already live in host memory, where DeepSpeed would move them.
  if (z.offload_optimizer && z.offload_optimizer->device == OffloadDevice::cpu) {
    if (z.stage == 0)
      ctx.warn("zero_optimization.offload_optimizer", "ignored at ZeRO stage 0, as DeepSpeed ignores it");
    else
      ctx.note("zero_optimization.offload_optimizer",
               "device \"cpu\": on CPU ranks the optimizer state already lives in host memory; nothing moves");
  }
  if (z.offload_param && z.offload_param->device == OffloadDevice::cpu) {
    if (z.stage != 3)
      ctx.warn("zero_optimization.offload_param", fmt::format("ignored at ZeRO stage {}, as DeepSpeed ignores it "
                                                              "(parameters are offloaded at stage 3 only)", z.stage));
    else
      ctx.note("zero_optimization.offload_param",
               "device \"cpu\": on CPU ranks the parameters already live in host memory; nothing moves");
  }
  if (z.offload_optimizer && z.offload_optimizer->device == OffloadDevice::nvme) check_nvme_optimizer(c, ctx);
  if (z.offload_param && z.offload_param->device == OffloadDevice::nvme) check_nvme_params(c, ctx);
  if (z.zero_hpz_partition_size > 1)
    refuse("zero_hpz_partition_size", std::to_string(z.zero_hpz_partition_size), "ZeRO++ hierarchical partitioning");
  if (z.zero_quantized_weights) refuse("zero_quantized_weights", "true", "ZeRO++ quantized weights");
  if (z.zero_quantized_nontrainable_weights)
    refuse("zero_quantized_nontrainable_weights", "true", "ZeRO++ quantized weights");
  if (z.zero_quantized_gradients) refuse("zero_quantized_gradients", "true", "ZeRO++ quantized gradients");
  if (z.mics_shard_size > 0) refuse("mics_shard_size", std::to_string(z.mics_shard_size), "MiCS sharding");
  if (c.pipeline.stages > 1 && z.stage >= 2)
    ctx.error("zero_optimization.stage", fmt::format("{} with pipeline.stages {}: ZeRO-2 and ZeRO-3 are incompatible "
                                                     "with pipeline parallelism (as in DeepSpeed); use stage 0 or 1",
                                                     z.stage, c.pipeline.stages));
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing;
  if (ac.partition_activations)
    ctx.error("activation_checkpointing.partition_activations", "true is not implemented yet");
  if (ac.cpu_checkpointing) ctx.error("activation_checkpointing.cpu_checkpointing", "true is not implemented yet");
}

}  // namespace ds::cfg
