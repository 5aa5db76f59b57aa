// The small sections: fp16, bf16 (alias bfloat16), aio, comms_logger, csv_monitor, tensorboard,
// activation_checkpointing and checkpoint (DeepSpeed's keys plus dsworker's dir/save_interval/keep_last).
#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

int64_t at_least(Section& s, const char* key, int64_t fallback, int64_t min) {
  int64_t v = s.integer(key, fallback);
  s.at_least(key, static_cast<double>(v), static_cast<double>(min));
  return v;
}

}  // namespace

Fp16Config parse_fp16(Section& top) {
  Section s = top.object("fp16");
  Fp16Config c;
  c.enabled = s.flag("enabled", c.enabled);
  c.auto_cast = s.flag("auto_cast", c.auto_cast);
  c.loss_scale = s.number("loss_scale", c.loss_scale);
  s.at_least("loss_scale", c.loss_scale, 0.0);
  c.initial_scale_power = at_least(s, "initial_scale_power", c.initial_scale_power, 0);
  if (c.initial_scale_power > 64)  // 2^p must stay a finite fp32 loss gradient with room to grow
    s.fail("initial_scale_power", fmt::format("{} is above 64", c.initial_scale_power));
  c.loss_scale_window = at_least(s, "loss_scale_window", c.loss_scale_window, 1);
  c.hysteresis = at_least(s, "hysteresis", c.hysteresis, 1);
  c.consecutive_hysteresis = s.flag("consecutive_hysteresis", c.consecutive_hysteresis);
  c.min_loss_scale = s.number("min_loss_scale", c.min_loss_scale);
  s.greater_than("min_loss_scale", c.min_loss_scale, 0.0);
  if (s.flag("fp16_master_weights_and_grads", false))
    s.fail("fp16_master_weights_and_grads",
           "true is not supported by dsworker (DeepSpeed: ZeRO-2 with CPU offload and DeepSpeedCPUAdam only)");
  s.finish();
  return c;
}

Bf16Config parse_bf16(Section& top) {
  const auto* bf16 = top.get("bf16");
  const auto* legacy = top.get("bfloat16");
  if (bf16 != nullptr && legacy != nullptr) top.fail("bfloat16", "given together with 'bf16'; keep one");
  Section s(top.context(), bf16 ? bf16 : legacy, bf16 || !legacy ? "bf16" : "bfloat16", /*drop_auto=*/true);
  Bf16Config c;
  c.enabled = s.flag("enabled", c.enabled);
  c.immediate_grad_update = s.flag("immediate_grad_update", c.immediate_grad_update);
  c.check_grad_overflow = s.flag("check_grad_overflow", c.check_grad_overflow);
  // DeepSpeed >= 0.18.3; checked against the ZeRO stage and gradient type in parse.cpp.
  c.master_weights_and_grads = s.flag("bf16_master_weights_and_grads", c.master_weights_and_grads);
  c.optimizer_states = s.flag("bf16_optimizer_states", c.optimizer_states);
  s.finish();
  return c;
}

TorchAutocastConfig parse_torch_autocast(Section& top) {
  Section s = top.object("torch_autocast");
  TorchAutocastConfig c;
  c.enabled = s.flag("enabled", c.enabled);
  // DeepSpeed's DtypeEnum spellings, with or without "torch.".
  const std::vector<std::string> names = {"bfloat16", "torch.bfloat16", "bf16", "float16", "torch.float16", "fp16",
                                          "half", "torch.half"};
  size_t dtype = s.choice("dtype", names, 0);
  c.dtype = dtype < 3 ? Dtype::bf16 : Dtype::fp16;
  if (!s.strings("lower_precision_safe_modules").empty())
    s.warn("lower_precision_safe_modules", "ignored: dsworker's 16-bit compute covers every layer of the model");
  s.finish();
  return c;
}

// DeepSpeed reads the aio keys it knows with dict.get and ignores the rest, so others are warnings.
AioConfig parse_aio(Section& top) {
  Section s(top.context(), top.get("aio"), "aio", /*drop_auto=*/true);
  AioConfig c;
  c.block_size = s.integer("block_size", c.block_size);
  if (c.block_size < 512 || c.block_size % 512 != 0 || c.block_size > (int64_t{1} << 30))
    s.error("block_size", fmt::format("{} must be a multiple of 512 bytes, at most 1 GiB", c.block_size));
  c.queue_depth = s.integer("queue_depth", c.queue_depth);
  if (c.queue_depth < 1 || c.queue_depth > 4096) s.error("queue_depth", fmt::format("{} must be 1 to 4096", c.queue_depth));
  c.intra_op_parallelism = at_least(s, "intra_op_parallelism", c.intra_op_parallelism, 1);
  c.single_submit = s.flag("single_submit", c.single_submit);
  c.overlap_events = s.flag("overlap_events", c.overlap_events);
  if (s.flag("use_gds", false)) s.error("use_gds", "true needs GPUDirect Storage on CUDA; dsworker's ranks are CPU");
  if (s.has("thread_count")) {
    s.integer("thread_count", 1);
    s.warn("thread_count", "ignored, as DeepSpeed >= 0.16.4 ignores it (the key is now intra_op_parallelism)");
  }
  s.finish(/*warn_only=*/true);
  return c;
}

CommsLoggerConfig parse_comms_logger(Section& top) {
  Section s(top.context(), top.get("comms_logger"), "comms_logger", /*drop_auto=*/true);
  CommsLoggerConfig c;
  c.enabled = s.flag("enabled", c.enabled);
  c.verbose = s.flag("verbose", c.verbose);
  c.prof_all = s.flag("prof_all", c.prof_all);
  c.debug = s.flag("debug", c.debug);
  c.prof_ops = s.strings("prof_ops");
  s.finish();
  return c;
}

MonitorConfig parse_monitor(Section& top, const char* key) {
  Section s(top.context(), top.get(key), key, /*drop_auto=*/true);
  MonitorConfig c;
  c.enabled = s.flag("enabled", c.enabled);
  c.output_path = s.string("output_path", c.output_path);
  c.job_name = s.string("job_name", c.job_name);
  s.finish();
  return c;
}

ActivationCheckpointingConfig parse_activation_checkpointing(Section& top) {
  Section s = top.object("activation_checkpointing");
  ActivationCheckpointingConfig c;
  c.present = top.get("activation_checkpointing") != nullptr;
  c.partition_activations = s.flag("partition_activations", c.partition_activations);
  c.cpu_checkpointing = s.flag("cpu_checkpointing", c.cpu_checkpointing);
  c.contiguous_memory_optimization = s.flag("contiguous_memory_optimization", c.contiguous_memory_optimization);
  c.number_checkpoints = s.optional_integer("number_checkpoints");
  if (c.number_checkpoints) s.at_least("number_checkpoints", static_cast<double>(*c.number_checkpoints), 1);
  c.synchronize_checkpoint_boundary = s.flag("synchronize_checkpoint_boundary", c.synchronize_checkpoint_boundary);
  c.profile = s.flag("profile", c.profile);
  s.finish();
  return c;
}

PipelineConfig parse_pipeline(Section& top, int world_size) {
  PipelineConfig c;
  c.present = top.get("pipeline") != nullptr;
  Section s = top.object("pipeline");
  if (const auto* stages = s.get("stages"); stages && !(stages->is_string() && stages->get<std::string>() == "auto")) {
    c.stages = s.integer("stages", c.stages);
    s.at_least("stages", static_cast<double>(c.stages), 1);
    if (c.stages >= 1 && world_size % c.stages != 0)
      s.fail("stages", fmt::format("{} does not divide the world size {} (each stage has world size / stages "
                                   "data-parallel ranks)", c.stages, world_size));
    if (c.stages < 1) c.stages = 1;
  }
  c.partition = s.string("partition", c.partition);
  if (c.partition == "best") c.partition = "parameters";
  c.activation_checkpoint_interval = s.integer("activation_checkpoint_interval", c.activation_checkpoint_interval);
  s.at_least("activation_checkpoint_interval", static_cast<double>(c.activation_checkpoint_interval), 0);
  c.pipe_partitioned = s.flag("pipe_partitioned", c.pipe_partitioned);
  c.grad_partitioned = s.flag("grad_partitioned", c.grad_partitioned);
  for (const char* key : {"use_reentrant", "seed_layers"})
    s.flag(key, false);  // how torch recomputes / dropout seeds: nothing to do here
  s.finish();
  return c;
}

TensorParallelConfig parse_tensor_parallel(Section& top) {
  TensorParallelConfig c;
  Section s = top.object("tensor_parallel");
  const int64_t size = s.integer("autotp_size", 0);
  s.at_least("autotp_size", static_cast<double>(size), 0);
  c.autotp_size = std::max<int64_t>(size, 1);
  s.flag("tp_overlap_comm", false);  // speed only: the all-reduces are not overlapped here
  if (s.has("dtype")) s.choice("dtype", {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}, 1, true);
  for (const char* key : {"tp", "partition_config", "preset_model", "tp_grain_size"})
    if (s.has(key))
      s.error(key, "not supported by dsworker: its models declare their own split (the gpt plugin's is Megatron's); "
                   "set autotp_size only");
  s.finish();
  return c;
}

void check_model_parallel_sizes(Context& ctx, const DsConfig& c, int world_size) {
  const int64_t model_ranks = c.pipeline.stages * c.tensor_parallel.autotp_size * c.sequence_parallel_size;
  if (world_size % model_ranks == 0) return;
  if (c.sequence_parallel_size > 1) {
    std::string times;
    if (c.pipeline.stages > 1) times += fmt::format(" x pipeline.stages {}", c.pipeline.stages);
    if (c.tensor_parallel.autotp_size > 1) times += fmt::format(" x tensor_parallel.autotp_size {}", c.tensor_parallel.autotp_size);
    ctx.error("sequence_parallel_size", fmt::format("{}{} does not divide the world size {}", c.sequence_parallel_size,
                                                    times, world_size));
  }
  else if (c.tensor_parallel.autotp_size > 1)
    ctx.error("tensor_parallel.autotp_size",
              fmt::format("{} x pipeline.stages {} does not divide the world size {}", c.tensor_parallel.autotp_size,
                          c.pipeline.stages, world_size));
}

int64_t peek_model_parallel_size(const nlohmann::json& root) {
  auto positive = [](const nlohmann::json& block, const char* key) -> int64_t {
    if (!block.is_object()) return 1;
    const auto v = block.find(key);
    return v != block.end() && v->is_number_integer() && v->get<int64_t>() >= 1 ? v->get<int64_t>() : 1;
  };
  auto in = [&](const char* block, const char* key) -> int64_t {
    const auto b = root.find(block);
    return b == root.end() ? 1 : positive(*b, key);
  };
  return in("pipeline", "stages") * in("tensor_parallel", "autotp_size") * positive(root, "sequence_parallel_size");
}

CheckpointConfig parse_checkpoint(Section& top) {
  Section s = top.object("checkpoint");
  CheckpointConfig c;
  c.dir = s.string("dir", c.dir);
  c.save_interval = at_least(s, "save_interval", c.save_interval, 0);
  c.keep_last = at_least(s, "keep_last", c.keep_last, 0);
  c.tag_validation = static_cast<TagValidation>(s.choice("tag_validation", {"Ignore", "Warn", "Fail"}, 1, true));
  c.use_node_local_storage = s.flag("use_node_local_storage", c.use_node_local_storage);
  if (s.flag("load_universal", false))
    s.fail("load_universal", "true is not supported by dsworker (universal checkpoints)");
  if (s.has("checkpoint_serialization")) {
    s.flag("checkpoint_serialization", true);
    s.warn("checkpoint_serialization", "ignored: dsworker writes its own checkpoint format");
  }
  if (s.has("writer")) s.warn("writer", "ignored: dsworker writes its own checkpoint format");
  Section parallel_write = s.object("parallel_write");
  if (parallel_write.flag("pipeline_stage", false))
    parallel_write.fail("pipeline_stage", "true is not supported by dsworker (checkpoints of pipeline stages)");
  parallel_write.finish();
  s.finish();
  return c;
}

}  // namespace ds::cfg
