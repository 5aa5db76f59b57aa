// DsConfig → the fully resolved ds_config (what `dsworker --print_config` shows). Keys use the
// spellings users write (stage3_* for ZeRO-3 knobs), so the output parses back to the same config.
#include "config/ds_config.h"

namespace ds {
namespace {

using ojson = nlohmann::ordered_json;

std::string_view device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::none: return "none";
    case OffloadDevice::cpu: return "cpu";
    case OffloadDevice::nvme: return "nvme";
  }
  return "?";
}

std::string_view warmup_name(WarmupType t) { return t == WarmupType::log ? "log" : "linear"; }

template <typename T>
ojson or_null(const std::optional<T>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}

// The 1-bit optimizers' keys (one overload each; the others never reach it).
void compressed_json(const CompressedCommParams& c, ojson& p) {
  p["betas"] = {c.beta1, c.beta2};
  p["eps"] = c.eps;
  p["weight_decay"] = c.weight_decay;
  p["cuda_aware"] = c.cuda_aware;
  p["comm_backend_name"] = c.comm_backend_name;
}
void compressed_json(const OneBitAdamParams& a, ojson& p) {
  compressed_json(static_cast<const CompressedCommParams&>(a), p);
  p["freeze_step"] = a.freeze_step;
}
void compressed_json(const ZeroOneAdamParams& z, ojson& p) {
  compressed_json(static_cast<const CompressedCommParams&>(z), p);
  p["var_freeze_step"] = z.var_freeze_step;
  p["var_update_scaler"] = z.var_update_scaler;
  p["local_step_scaler"] = z.local_step_scaler;
  p["local_step_clipper"] = z.local_step_clipper;
}
void compressed_json(const OneBitLambParams& l, ojson& p) {
  compressed_json(static_cast<const CompressedCommParams&>(l), p);
  p["freeze_step"] = l.freeze_step;
  p["max_coeff"] = l.max_coeff;
  p["min_coeff"] = l.min_coeff;
  p["coeff_beta"] = l.coeff_beta;
  p["factor_max"] = l.factor_max;
  p["factor_min"] = l.factor_min;
  p["factor_threshold"] = l.factor_threshold;
}
template <typename Other>
void compressed_json(const Other&, ojson&) {}

ojson optimizer_json(const OptimizerConfig& o) {
  ojson p = {{"lr", o.lr}};
  if (const auto* a = std::get_if<AdamParams>(&o.params)) {
    p["betas"] = {a->beta1, a->beta2};
    p["eps"] = a->eps;
    p["weight_decay"] = a->weight_decay;
    p["bias_correction"] = a->bias_correction;
    p["adam_w_mode"] = a->adam_w_mode;
    p["torch_adam"] = a->torch_adam;
  } else if (const auto* s = std::get_if<SgdParams>(&o.params)) {
    p["momentum"] = s->momentum;
    p["dampening"] = s->dampening;
    p["weight_decay"] = s->weight_decay;
    p["nesterov"] = s->nesterov;
  } else if (const auto* a = std::get_if<AdagradParams>(&o.params)) {
    p["lr_decay"] = a->lr_decay;
    p["weight_decay"] = a->weight_decay;
    p["initial_accumulator_value"] = a->initial_accumulator_value;
    p["eps"] = a->eps;
  } else if (const auto* r = std::get_if<RmspropParams>(&o.params)) {
    p["alpha"] = r->alpha;
    p["eps"] = r->eps;
    p["weight_decay"] = r->weight_decay;
    p["momentum"] = r->momentum;
    p["centered"] = r->centered;
  } else if (const auto* n = std::get_if<LionParams>(&o.params)) {
    p["betas"] = {n->beta1, n->beta2};
    p["weight_decay"] = n->weight_decay;
  } else if (const auto* m = std::get_if<MuonParams>(&o.params)) {
    p["muon_lr"] = o.lr;
    p["adam_lr"] = m->adam_lr;
    p["momentum"] = m->momentum;
    p["weight_decay"] = m->weight_decay;
    p["betas"] = {m->beta1, m->beta2};
    p["eps"] = m->eps;
  } else if (const auto* l = std::get_if<LambParams>(&o.params)) {
    p["betas"] = {l->beta1, l->beta2};
    p["eps"] = l->eps;
    p["eps_inside_sqrt"] = l->eps_inside_sqrt;
    p["weight_decay"] = l->weight_decay;
    p["bias_correction"] = l->bias_correction;
    p["max_coeff"] = l->max_coeff;
    p["min_coeff"] = l->min_coeff;
  } else {
    std::visit([&](const auto& c) { compressed_json(c, p); }, o.params);
  }
  return {{"type", optimizer_type_name(o.type)}, {"params", p}, {"legacy_fusion", o.legacy_fusion}};
}

ojson scheduler_json(const SchedulerConfig& s) {
  ojson p = ojson::object();
  if (const auto* w = std::get_if<WarmupParams>(&s.params)) {
    p = {{"warmup_min_lr", w->warmup_min_lr},
         {"warmup_max_lr", w->warmup_max_lr},
         {"warmup_num_steps", w->warmup_num_steps},
         {"warmup_type", warmup_name(w->warmup_type)}};
    if (s.type == SchedulerType::WarmupDecayLR) p["total_num_steps"] = w->total_num_steps;
  } else if (const auto* c = std::get_if<WarmupCosineParams>(&s.params)) {
    p = {{"total_num_steps", c->total_num_steps},
         {"warmup_min_ratio", c->warmup_min_ratio},
         {"warmup_num_steps", c->warmup_num_steps},
         {"cos_min_ratio", c->cos_min_ratio},
         {"warmup_type", warmup_name(c->warmup_type)}};
  } else if (const auto* o = std::get_if<OneCycleParams>(&s.params)) {
    p = {{"cycle_min_lr", o->cycle_min_lr},
         {"cycle_max_lr", o->cycle_max_lr},
         {"decay_lr_rate", o->decay_lr_rate},
         {"cycle_first_step_size", o->cycle_first_step_size},
         {"cycle_second_step_size", o->cycle_second_step_size},
         {"decay_step_size", o->decay_step_size},
         {"cycle_momentum", o->cycle_momentum},
         {"cycle_min_mom", o->cycle_min_mom},
         {"cycle_max_mom", o->cycle_max_mom},
         {"decay_mom_rate", o->decay_mom_rate}};
  } else if (const auto* r = std::get_if<LrRangeTestParams>(&s.params)) {
    p = {{"lr_range_test_min_lr", r->min_lr},
         {"lr_range_test_step_size", r->step_size},
         {"lr_range_test_step_rate", r->step_rate},
         {"lr_range_test_staircase", r->staircase}};
  } else if (const auto* t = std::get_if<TorchScheduleParams>(&s.params)) {
    switch (s.type) {
      case SchedulerType::StepLR: p = {{"step_size", t->step_size}, {"gamma", t->gamma}}; break;
      case SchedulerType::MultiStepLR: p = {{"milestones", t->milestones}, {"gamma", t->gamma}}; break;
      case SchedulerType::ConstantLR: p = {{"factor", t->factor}, {"total_iters", t->total_iters}}; break;
      case SchedulerType::LinearLR:
        p = {{"start_factor", t->start_factor}, {"end_factor", t->end_factor}, {"total_iters", t->total_iters}};
        break;
      case SchedulerType::ExponentialLR: p = {{"gamma", t->gamma}}; break;
      case SchedulerType::PolynomialLR: p = {{"total_iters", t->total_iters}, {"power", t->power}}; break;
      case SchedulerType::CosineAnnealingLR: p = {{"T_max", t->T_max}, {"eta_min", t->eta_min}}; break;
      default: p = {{"T_0", t->T_0}, {"T_mult", t->T_mult}, {"eta_min", t->eta_min}}; break;
    }
  }
  return {{"type", scheduler_type_name(s.type)}, {"params", p}};
}

ojson zero_json(const ZeroConfig& z) {
  ojson offload_param = nullptr, offload_optimizer = nullptr, loco = nullptr;
  if (const auto& o = z.offload_param)
    offload_param = {{"device", device_name(o->device)}, {"nvme_path", or_null(o->nvme_path)},
                     {"buffer_count", o->buffer_count},  {"buffer_size", o->buffer_size},
                     {"max_in_cpu", o->max_in_cpu},      {"pin_memory", o->pin_memory}};
  if (const auto& o = z.offload_optimizer)
    offload_optimizer = {{"device", device_name(o->device)}, {"nvme_path", or_null(o->nvme_path)},
                         {"buffer_count", o->buffer_count},  {"pin_memory", o->pin_memory},
                         {"pipeline_read", o->pipeline_read}, {"pipeline_write", o->pipeline_write},
                         {"fast_init", o->fast_init},        {"ratio", o->ratio}};
  if (const auto& l = z.zeropp_loco_param) loco = {{"err_beta", l->err_beta}, {"reset_T", l->reset_T}};
  return {
      {"stage", z.stage},
      {"contiguous_gradients", z.contiguous_gradients},
      {"reduce_scatter", z.reduce_scatter},
      {"reduce_bucket_size", z.reduce_bucket_size},
      {"use_multi_rank_bucket_allreduce", z.use_multi_rank_bucket_allreduce},
      {"allgather_partitions", z.allgather_partitions},
      {"allgather_bucket_size", z.allgather_bucket_size},
      {"overlap_comm", z.overlap_comm},
      {"load_from_fp32_weights", z.load_from_fp32_weights},
      {"elastic_checkpoint", z.elastic_checkpoint},
      {"offload_param", offload_param},
      {"offload_optimizer", offload_optimizer},
      {"sub_group_size", z.sub_group_size},
      {"stage3_prefetch_bucket_size", z.prefetch_bucket_size},
      {"stage3_param_persistence_threshold", z.param_persistence_threshold},
      {"stage3_model_persistence_threshold", z.model_persistence_threshold},
      {"stage3_max_live_parameters", z.max_live_parameters},
      {"stage3_max_reuse_distance", z.max_reuse_distance},
      {"stage3_gather_16bit_weights_on_model_save", z.gather_16bit_weights_on_model_save},
      {"stage3_module_granularity_threshold", z.module_granularity_threshold},
      {"stage3_use_all_reduce_for_fetch_params", z.use_all_reduce_for_fetch_params},
      {"ignore_unused_parameters", z.ignore_unused_parameters},
      {"round_robin_gradients", z.round_robin_gradients},
      {"zero_hpz_partition_size", z.zero_hpz_partition_size},
      {"zero_quantized_weights", z.zero_quantized_weights},
      {"zero_quantized_nontrainable_weights", z.zero_quantized_nontrainable_weights},
      {"zero_quantized_gradients", z.zero_quantized_gradients},
      {"zeropp_loco_param", loco},
      {"mics_shard_size", z.mics_shard_size},
      {"mics_hierarchical_params_gather", z.mics_hierarchical_params_gather},
      {"memory_efficient_linear", z.memory_efficient_linear},
      {"pipeline_loading_checkpoint", z.pipeline_loading_checkpoint},
      {"override_module_apply", z.override_module_apply},
      {"log_trace_cache_warnings", z.log_trace_cache_warnings},
  };
}

std::string_view tag_validation_name(TagValidation t) {
  switch (t) {
    case TagValidation::Ignore: return "Ignore";
    case TagValidation::Warn: return "Warn";
    case TagValidation::Fail: return "Fail";
  }
  return "?";
}

}  // namespace

std::string_view optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::Adam: return "Adam";
    case OptimizerType::AdamW: return "AdamW";
    case OptimizerType::Adagrad: return "Adagrad";
    case OptimizerType::RMSprop: return "RMSprop";
    case OptimizerType::SGD: return "SGD";
    case OptimizerType::Lion: return "Lion";
    case OptimizerType::Muon: return "Muon";
    case OptimizerType::Lamb: return "Lamb";
    case OptimizerType::OneBitAdam: return "OneBitAdam";
    case OptimizerType::ZeroOneAdam: return "ZeroOneAdam";
    case OptimizerType::OneBitLamb: return "OneBitLamb";
  }
  return "?";
}

std::string_view scheduler_type_name(SchedulerType type) {
  switch (type) {
    case SchedulerType::WarmupLR: return "WarmupLR";
    case SchedulerType::WarmupDecayLR: return "WarmupDecayLR";
    case SchedulerType::WarmupCosineLR: return "WarmupCosineLR";
    case SchedulerType::OneCycle: return "OneCycle";
    case SchedulerType::LRRangeTest: return "LRRangeTest";
    case SchedulerType::StepLR: return "StepLR";
    case SchedulerType::MultiStepLR: return "MultiStepLR";
    case SchedulerType::ConstantLR: return "ConstantLR";
    case SchedulerType::LinearLR: return "LinearLR";
    case SchedulerType::ExponentialLR: return "ExponentialLR";
    case SchedulerType::PolynomialLR: return "PolynomialLR";
    case SchedulerType::CosineAnnealingLR: return "CosineAnnealingLR";
    case SchedulerType::CosineAnnealingWarmRestarts: return "CosineAnnealingWarmRestarts";
  }
  return "?";
}

nlohmann::ordered_json resolved_json(const DsConfig& c) {
  const auto& f = c.fp16;
  const auto& a = c.activation_checkpointing;
  const auto& k = c.checkpoint;
  return {
      {"train_batch_size", c.train_batch_size},
      {"train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu},
      {"gradient_accumulation_steps", c.gradient_accumulation_steps},
      {"steps_per_print", or_null(c.steps_per_print)},
      {"wall_clock_breakdown", c.wall_clock_breakdown},
      {"memory_breakdown", c.memory_breakdown},
      {"seed", c.seed},
      {"gradient_clipping", c.gradient_clipping},
      {"prescale_gradients", c.prescale_gradients},
      {"gradient_predivide_factor", c.gradient_predivide_factor},
      {"communication_data_type", dtype_name(c.communication_data_type)},
      {"dataloader_drop_last", c.dataloader_drop_last},
      {"zero_allow_untested_optimizer", c.zero_allow_untested_optimizer},
      {"optimizer", optimizer_json(c.optimizer)},
      {"scheduler", c.scheduler ? scheduler_json(*c.scheduler) : ojson(nullptr)},
      {"fp16",
       {{"enabled", f.enabled},
        {"auto_cast", f.auto_cast},
        {"loss_scale", f.loss_scale},
        {"initial_scale_power", f.initial_scale_power},
        {"loss_scale_window", f.loss_scale_window},
        {"hysteresis", f.hysteresis},
        {"consecutive_hysteresis", f.consecutive_hysteresis},
        {"min_loss_scale", f.min_loss_scale}}},
      {"bf16",
       {{"enabled", c.bf16.enabled},
        {"immediate_grad_update", c.bf16.immediate_grad_update},
        {"check_grad_overflow", c.bf16.check_grad_overflow},
        {"bf16_master_weights_and_grads", c.bf16.master_weights_and_grads},
        {"bf16_optimizer_states", c.bf16.optimizer_states}}},
      {"data_types", {{"grad_accum_dtype", dtype_name(c.grad_accum_dtype)}}},
      {"zero_optimization", zero_json(c.zero_optimization)},
      {"aio",
       {{"block_size", c.aio.block_size},
        {"queue_depth", c.aio.queue_depth},
        {"intra_op_parallelism", c.aio.intra_op_parallelism},
        {"single_submit", c.aio.single_submit},
        {"overlap_events", c.aio.overlap_events}}},
      {"comms_logger",
       {{"enabled", c.comms_logger.enabled},
        {"verbose", c.comms_logger.verbose},
        {"prof_all", c.comms_logger.prof_all},
        {"debug", c.comms_logger.debug},
        {"prof_ops", c.comms_logger.prof_ops}}},
      {"csv_monitor",
       {{"enabled", c.csv_monitor.enabled},
        {"output_path", c.csv_monitor.output_path},
        {"job_name", c.csv_monitor.job_name}}},
      {"tensorboard",
       {{"enabled", c.tensorboard.enabled},
        {"output_path", c.tensorboard.output_path},
        {"job_name", c.tensorboard.job_name}}},
      {"activation_checkpointing",
       {{"partition_activations", a.partition_activations},
        {"cpu_checkpointing", a.cpu_checkpointing},
        {"contiguous_memory_optimization", a.contiguous_memory_optimization},
        {"number_checkpoints", or_null(a.number_checkpoints)},
        {"synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary},
        {"profile", a.profile}}},
      {"pipeline",
       {{"stages", c.pipeline.stages},
        {"partition", c.pipeline.partition},
        {"activation_checkpoint_interval", c.pipeline.activation_checkpoint_interval},
        {"pipe_partitioned", c.pipeline.pipe_partitioned},
        {"grad_partitioned", c.pipeline.grad_partitioned}}},
      {"tensor_parallel", {{"autotp_size", c.tensor_parallel.autotp_size}}},
      {"sequence_parallel_size", c.sequence_parallel_size},
      {"checkpoint",
       {{"dir", k.dir},
        {"save_interval", k.save_interval},
        {"keep_last", k.keep_last},
        {"tag_validation", tag_validation_name(k.tag_validation)},
        {"use_node_local_storage", k.use_node_local_storage}}},
      {"model", ojson(c.model)},
      {"data", ojson(c.data)},
      {"sample", ojson(c.sample)},
  };
}

}  // namespace ds
