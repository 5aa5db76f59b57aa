// DeepSpeed top-level keys dsworker does not implement, and what happens to each. A key is "active"
// when it would do something in DeepSpeed (by `when`); inactive keys are accepted silently.
//
// | key                                  | policy  | active when        | why                                          |
// |--------------------------------------|---------|--------------------|----------------------------------------------|
// | wandb, comet                         | ignore  | enabled            | monitoring; dsworker writes csv_monitor      |
// | flops_profiler                       | ignore  | enabled            | profiling                                    |
// | autotuning                           | ignore  | enabled            | driven by `deepspeed --autotuning`           |
// | timers                               | ignore  | enabled            | throughput timers; dsworker prints its own   |
// | nebula                               | ignore  | enabled            | checkpoint engine; dsworker writes its own   |
// | compile                              | ignore  | present            | speed only (torch.compile)                   |
// | dump_state                           | ignore  | true               | debug print                                  |
// | graph_harvesting                     | ignore  | true               | speed only (CUDA graphs)                     |
// | sparse_gradients                     | ignore  | true               | CSR all-reduce: same sums as the dense one   |
// | disable_allgather, fp32_allreduce    | ignore  | true               | legacy, unused by DeepSpeed's engine         |
// | vocabulary_size                      | ignore  | present            | DeepSpeed only warns about it                |
// | zero_force_ds_cpu_optimizer          | ignore  | false              | dsworker takes no client optimizer           |
// | seq_parallel_communication_data_type | ignore  | present            | the all-to-alls carry fp32, its default      |
// | amp                                  | refuse  | enabled            | Apex AMP                                     |
// | sparse_attention                     | refuse  | present            | changes the model                            |
// | elasticity                           | refuse  | enabled            | elastic batch sizes                          |
// | compression_training                 | refuse  | enabled (anywhere) | changes the model                            |
// | progressive_layer_drop               | refuse  | enabled            | changes the training                         |
// | curriculum_learning, data_efficiency | refuse  | enabled (anywhere) | changes the data                             |
// | eigenvalue, quantize_training        | refuse  | enabled            | changes the training                         |
// | hybrid_engine                        | refuse  | enabled            | RLHF inference/training switching            |
// | weight_quantization                  | refuse  | present            | changes the model                            |
// | use_data_before_expert_parallelism   | refuse  | true               | mixture of experts                           |
// | expert_parallel                      | refuse  | enabled            | mixture of experts (AutoEP)                  |
// | managed_gradient_accumulation        | refuse  | false              | dsworker runs the accumulation loop itself   |
// | gradient_allreduce_op                | refuse  | not "mean"         | gradients are averaged                       |
// | log_level                            | ignore  | present            | dsworker's own logging                       |
// | disable_python_gc                    | ignore  | true               | Python's garbage collector                   |
// | data_parallel_size                   | ignore  | present            | the data-parallel size is the world size     |
// | datastates_ckpt                      | ignore  | present            | checkpoint engine; dsworker writes its own   |
//
// Every other top-level key DeepSpeed reads is implemented (parse*.cpp); a key DeepSpeed does not
// know is reported and ignored, as DeepSpeed ignores it.
#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

enum class Policy { ignore, refuse };
enum class When { enabled, present, is_true, is_false, not_one, not_mean };

struct ForeignKey {
  const char* key;
  Policy policy;
  When when;
  const char* why;
};

constexpr ForeignKey kForeign[] = {
    {"wandb", Policy::ignore, When::enabled, "monitoring; dsworker writes csv_monitor and tensorboard"},
    {"comet", Policy::ignore, When::enabled, "monitoring; dsworker writes csv_monitor and tensorboard"},
    {"flops_profiler", Policy::ignore, When::enabled, "profiling"},
    {"autotuning", Policy::ignore, When::enabled, "autotuning is driven by `deepspeed --autotuning`"},
    {"timers", Policy::ignore, When::enabled, "throughput timers; dsworker prints its own"},
    {"nebula", Policy::ignore, When::enabled, "checkpoint engine; dsworker writes its own checkpoints"},
    {"compile", Policy::ignore, When::present, "torch.compile settings"},
    {"dump_state", Policy::ignore, When::is_true, "debug print"},
    {"graph_harvesting", Policy::ignore, When::is_true, "CUDA-graph capture, speed only"},
    {"sparse_gradients", Policy::ignore, When::is_true, "dense all-reduce gives the same sums"},
    {"disable_allgather", Policy::ignore, When::is_true, "legacy, unused by DeepSpeed's engine"},
    {"fp32_allreduce", Policy::ignore, When::is_true, "legacy, unused by DeepSpeed's engine"},
    {"vocabulary_size", Policy::ignore, When::present, "DeepSpeed only warns about it"},
    {"zero_force_ds_cpu_optimizer", Policy::ignore, When::is_false, "dsworker takes no client optimizer"},
    {"seq_parallel_communication_data_type", Policy::ignore, When::present,
     "the sequence-parallel all-to-alls carry fp32, DeepSpeed's default"},
    {"amp", Policy::refuse, When::enabled, "Apex AMP"},
    {"sparse_attention", Policy::refuse, When::present, "sparse attention changes the model"},
    {"elasticity", Policy::refuse, When::enabled, "elastic batch sizes"},
    {"compression_training", Policy::refuse, When::enabled, "compression changes the model"},
    {"progressive_layer_drop", Policy::refuse, When::enabled, "progressive layer drop"},
    {"curriculum_learning", Policy::refuse, When::enabled, "curriculum learning changes the data"},
    {"data_efficiency", Policy::refuse, When::enabled, "data efficiency changes the data"},
    {"eigenvalue", Policy::refuse, When::enabled, "eigenvalue-driven training"},
    {"quantize_training", Policy::refuse, When::enabled, "quantized training"},
    {"hybrid_engine", Policy::refuse, When::enabled, "hybrid engine (RLHF)"},
    {"weight_quantization", Policy::refuse, When::present, "weight quantization"},
    {"use_data_before_expert_parallelism", Policy::refuse, When::is_true, "mixture of experts"},
    {"expert_parallel", Policy::refuse, When::enabled, "mixture of experts (AutoEP)"},
    {"managed_gradient_accumulation", Policy::refuse, When::is_false,
     "a client-owned accumulation boundary; dsworker runs the accumulation loop itself"},
    {"gradient_allreduce_op", Policy::refuse, When::not_mean, "unaveraged gradients; dsworker averages them"},
    {"log_level", Policy::ignore, When::present, "dsworker has its own logging"},
    {"disable_python_gc", Policy::ignore, When::is_true, "Python's garbage collector; dsworker has none"},
    {"data_parallel_size", Policy::ignore, When::present, "the data-parallel size is the world size"},
    {"datastates_ckpt", Policy::ignore, When::present, "checkpoint engine; dsworker writes its own checkpoints"},
};

// `"enabled": true` anywhere inside (compression_training and data_efficiency nest their switches).
bool enabled_inside(const nlohmann::json& v) {
  if (v.is_object()) {
    auto it = v.find("enabled");
    if (it != v.end() && *it == true) return true;
  }
  if (v.is_structured())
    for (const auto& child : v)
      if (enabled_inside(child)) return true;
  return false;
}

bool active(const ForeignKey& f, const nlohmann::json& v) {
  switch (f.when) {
    case When::enabled: return enabled_inside(v) || v == true;
    case When::present: return true;
    case When::is_true: return v == true;
    case When::is_false: return v == false;
    case When::not_one: return v != 1;
    case When::not_mean: return v != "mean";
  }
  return false;
}

}  // namespace

void check_foreign_keys(Section& top) {
  for (const auto& f : kForeign) {
    const auto* v = top.get(f.key);
    if (v == nullptr || !active(f, *v)) continue;
    if (f.policy == Policy::refuse)
      top.error(f.key, fmt::format("{}not supported by dsworker ({})", v->is_structured() ? "" : show(*v) + " is ",
                                   f.why));
    else
      top.warn(f.key, fmt::format("ignored by dsworker ({})", f.why));
  }
}

}  // namespace ds::cfg
