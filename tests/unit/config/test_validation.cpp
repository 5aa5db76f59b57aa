// Validation: unknown keys with suggestions at every depth, type and range errors naming key and
// value, the ZeRO stage range, fp16 + bf16, and DeepSpeed keys dsworker ignores or refuses.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "config_test_util.h"

using ds::test::error_of;
using ds::test::parse;
using ds::test::warnings_of;

namespace {

// `extra` spliced into a config whose triad is valid.
std::string with(const std::string& extra) { return R"({"train_batch_size": 8, )" + extra + "}"; }

}  // namespace

TEST_CASE("unknown keys: at the top level a warning with a suggestion (DeepSpeed ignores them)") {
  CHECK(warnings_of(R"({"train_batch_sizee": 8})") ==
        "ds_config.json: train_batch_sizee: unknown key, ignored as DeepSpeed does (did you mean 'train_batch_size'?)");
  CHECK(warnings_of(with(R"("gradient_cliping": 1.0)")) ==
        "ds_config.json: gradient_cliping: unknown key, ignored as DeepSpeed does (did you mean 'gradient_clipping'?)");
  CHECK(warnings_of(with(R"("cuda_visible_devices": "0,1")")) ==
        "ds_config.json: cuda_visible_devices: unknown key, ignored as DeepSpeed does");
}

TEST_CASE("unknown keys: suggestion in optimizer params") {
  CHECK(error_of(with(R"("optimizer": {"type": "Adam", "params": {"lr": 0.001, "betaz": [0.9, 0.99]}})")) ==
        "ds_config.json: optimizer.params.betaz: unknown key (did you mean 'betas'?)");
  // betas belong to Adam, not to SGD.
  CHECK(error_of(with(R"("optimizer": {"type": "SGD", "params": {"betas": [0.9, 0.99]}})")) ==
        "ds_config.json: optimizer.params.betas: unknown key");
  CHECK(error_of(with(R"("optimizer": {"tpye": "Adam"})")) ==
        "ds_config.json: optimizer.tpye: unknown key (did you mean 'type'?)\n"
        "ds_config.json: optimizer.type: missing (one of Adam, AdamW, Adagrad, RMSprop, SGD, Lion, Muon, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb)");
}

TEST_CASE("unknown keys: suggestion in zero_optimization and its offload blocks") {
  CHECK(error_of(with(R"("zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sz": 1000})")) ==
        "ds_config.json: zero_optimization.stage3_prefetch_bucket_sz: unknown key "
        "(did you mean 'stage3_prefetch_bucket_size'?)");
  CHECK(error_of(with(R"("zero_optimization": {"stage": 2, "offload_optimizer": {"devcie": "cpu"}})")) ==
        "ds_config.json: zero_optimization.offload_optimizer.devcie: unknown key (did you mean 'device'?)");
  // Documented by DeepSpeed but not a field of its model: rejected there too.
  CHECK(error_of(with(R"("zero_optimization": {"grad_hooks": true})")) ==
        "ds_config.json: zero_optimization.grad_hooks: unknown key");
}

TEST_CASE("unknown keys: suggestion in scheduler params and small sections") {
  CHECK(error_of(with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_max": 0.01}})")) ==
        "ds_config.json: scheduler.params.warmup_max: unknown key (did you mean 'warmup_max_lr'?)");
  CHECK(error_of(with(R"("fp16": {"enabled": true, "loss_scale_windw": 100})")) ==
        "ds_config.json: fp16.loss_scale_windw: unknown key (did you mean 'loss_scale_window'?)");
  CHECK(error_of(with(R"("checkpoint": {"save_intervall": 10})")) ==
        "ds_config.json: checkpoint.save_intervall: unknown key (did you mean 'save_interval'?)");
  CHECK(error_of(with(R"("comms_logger": {"enable": true})")) ==
        "ds_config.json: comms_logger.enable: unknown key (did you mean 'enabled'?)");
}

TEST_CASE("types: errors name the key and the value") {
  CHECK(error_of(with(R"("gradient_clipping": "abc")")) == "ds_config.json: gradient_clipping: \"abc\" is not a number");
  CHECK(error_of(with(R"("wall_clock_breakdown": "yes")")) ==
        "ds_config.json: wall_clock_breakdown: \"yes\" is not a boolean (true or false)");
  CHECK(error_of(with(R"("zero_optimization": {"stage": "two"})")) ==
        "ds_config.json: zero_optimization.stage: \"two\" is not an integer");
  CHECK(error_of(with(R"("zero_optimization": {"reduce_bucket_size": 1.5})")) ==
        "ds_config.json: zero_optimization.reduce_bucket_size: 1.5 is not an integer");
  CHECK(error_of(with(R"("optimizer": {"type": "Adam", "params": {"betas": [0.9]}})")) ==
        "ds_config.json: optimizer.params.betas: [0.9] is not a pair of numbers [beta1, beta2]");
  CHECK(error_of(with(R"("fp16": 1)")) == "ds_config.json: fp16: 1 is not an object");
  CHECK(error_of(with(R"("comms_logger": {"prof_ops": ["all_reduce", 3]})")) ==
        "ds_config.json: comms_logger.prof_ops: [\"all_reduce\",3] is not a list of strings");
  CHECK(error_of(with(R"("model": [1, 2])")) == "ds_config.json: model: [1,2] is not an object");
  CHECK(error_of(R"([1, 2])") == "ds_config.json: the top level must be an object, not array");
}

TEST_CASE("types: auto and floats in pydantic sections") {
  // zero_optimization drops "auto" (default), and takes 5e8-style floats as integers.
  auto c = parse(with(R"("zero_optimization": {"stage": 2, "reduce_bucket_size": "auto",
                                               "allgather_bucket_size": 2e8})"));
  CHECK(c.zero_optimization.reduce_bucket_size == 500000000);
  CHECK(c.zero_optimization.allgather_bucket_size == 200000000);
  // Elsewhere "auto" that the Hugging Face Trainer does not fill is an error that explains itself.
  CHECK(error_of(with(R"("steps_per_print": "auto")")).find("HuggingFace") != std::string::npos);
}

TEST_CASE("ranges: values outside their domain") {
  CHECK(error_of(with(R"("gradient_clipping": -1)")) == "ds_config.json: gradient_clipping: -1 must be >= 0");
  CHECK(error_of(with(R"("steps_per_print": 0)")) == "ds_config.json: steps_per_print: 0 must be >= 1");
  CHECK(error_of(with(R"("fp16": {"min_loss_scale": 0})")) == "ds_config.json: fp16.min_loss_scale: 0 must be > 0");
  CHECK(error_of(with(R"("optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.0]}})")) ==
        "ds_config.json: optimizer.params.betas: [0.9,1.0] must lie in [0, 1)");
  CHECK(error_of(with(R"("optimizer": {"type": "Adam", "params": {"lr": -0.1}})")) ==
        "ds_config.json: optimizer.params.lr: -0.1 must be >= 0");
  CHECK(error_of(with(R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}})")) ==
        "ds_config.json: zero_optimization.offload_optimizer.ratio: 0.5 < 1 requires stage 3 (stage is 2)");
  CHECK(error_of(with(R"("zero_optimization": {"offload_param": {"device": "gpu"}})")) ==
        "ds_config.json: zero_optimization.offload_param.device: \"gpu\" is not one of \"none\", \"cpu\", \"nvme\" "
        "(did you mean 'cpu'?)");
}

TEST_CASE("zero stage must be 0 to 3") {
  CHECK(error_of(with(R"("zero_optimization": {"stage": 5})")) ==
        "ds_config.json: zero_optimization.stage: 5 is not one of 0, 1, 2, 3");
  CHECK(error_of(with(R"("zero_optimization": {"stage": -1})")) ==
        "ds_config.json: zero_optimization.stage: -1 is not one of 0, 1, 2, 3");
  for (int stage : {0, 1, 2, 3}) {
    auto c = parse(with(R"("zero_optimization": {"stage": )" + std::to_string(stage) + "}"));
    CHECK(c.zero_optimization.stage == stage);
    CHECK(c.zero_optimization.overlap_comm == (stage == 3));  // null overlap_comm: true for stage 3 only
  }
  // The deprecated boolean form: true is stage 1 with the top-level allgather_size.
  auto legacy = parse(with(R"("zero_optimization": true, "allgather_size": 1000)"));
  CHECK(legacy.zero_optimization.stage == 1);
  CHECK(legacy.zero_optimization.allgather_bucket_size == 1000);
  CHECK(legacy.warnings.size() == 1);
}

TEST_CASE("fp16 and bf16 cannot both be enabled") {
  CHECK(error_of(with(R"("fp16": {"enabled": true}, "bf16": {"enabled": true})")) ==
        "ds_config.json: bf16.enabled: fp16 and bf16 cannot both be enabled");
  CHECK(error_of(with(R"("fp16": {"enabled": true}, "bfloat16": {"enabled": true})")) ==
        "ds_config.json: bf16.enabled: fp16 and bf16 cannot both be enabled");
  CHECK(error_of(with(R"("bf16": {"enabled": true}, "bfloat16": {"enabled": true})")) ==
        "ds_config.json: bfloat16: given together with 'bf16'; keep one");
  // Either alone is fine here; whether the engine runs it is the engine's decision.
  CHECK(parse(with(R"("fp16": {"enabled": true})")).fp16.enabled);
  CHECK(parse(with(R"("bfloat16": {"enabled": true})")).bf16.enabled);
  CHECK(parse(with(R"("fp16": {"enabled": false}, "bf16": {"enabled": true})")).bf16.enabled);
}

TEST_CASE("foreign keys: monitoring is ignored with a warning") {
  auto c = parse(with(R"("wandb": {"enabled": true, "project": "x"}, "comet": {"enabled": false},
                         "flops_profiler": {"enabled": true})"));
  REQUIRE(c.warnings.size() == 2);
  CHECK(c.warnings[0] == "ds_config.json: wandb: ignored by dsworker (monitoring; dsworker writes csv_monitor and tensorboard)");
  CHECK(c.warnings[1] == "ds_config.json: flops_profiler: ignored by dsworker (profiling)");
  CHECK(parse(with(R"("sparse_gradients": false, "dump_state": false)")).warnings.empty());
}

TEST_CASE("foreign keys: training changes are refused") {
  CHECK(error_of(with(R"("amp": {"enabled": true, "opt_level": "O1"})")) ==
        "ds_config.json: amp: not supported by dsworker (Apex AMP)");
  // Nested switches count; a block with everything off is accepted.
  CHECK(error_of(with(R"("compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true}}})")) ==
        "ds_config.json: compression_training: not supported by dsworker (compression changes the model)");
  CHECK(parse(with(R"("compression_training": {"weight_quantization": {"shared_parameters": {"enabled": false}}})"))
            .warnings.empty());
  CHECK(parse(with(R"("amp": {"enabled": false})")).warnings.empty());
}

TEST_CASE("pipeline: stages divide the world; the batch sizes are per data-parallel rank") {
  auto c = parse(R"({"train_batch_size": 32, "gradient_accumulation_steps": 4, "pipeline": {"stages": 2}})", 4);
  CHECK(c.pipeline.stages == 2);
  CHECK(c.pipeline.partition == "parameters");  // DeepSpeed's PipelineModule default
  CHECK(c.world_size == 2);                     // data-parallel ranks
  CHECK(c.train_micro_batch_size_per_gpu == 4); // 32 // 2 // 4
  CHECK(parse(R"({"train_batch_size": 8, "pipeline": {"stages": "auto", "partition": "best"}})", 4).pipeline.stages == 1);
  CHECK(parse(R"({"train_batch_size": 8, "pipeline": {"partition": "best"}})").pipeline.partition == "parameters");
  CHECK(parse(R"({"train_batch_size": 8, "pipeline": {"partition": "type:block"}})").pipeline.partition == "type:block");
  CHECK(error_of(R"({"train_batch_size": 8, "pipeline": {"stages": 3}})", 4) ==
        "ds_config.json: pipeline.stages: 3 does not divide the world size 4 (each stage has world size / stages "
        "data-parallel ranks)");
  CHECK(error_of(R"({"train_batch_size": 8, "pipeline": {"stages": 0}})", 4) ==
        "ds_config.json: pipeline.stages: 0 must be >= 1");
  CHECK(error_of(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
                     "pipeline": {"stages": 2}})", 4) ==
        "ds_config.json: train_batch_size: 30 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 4 * "
        "data-parallel size 2 (world size / pipeline.stages 2) = 32");
  CHECK(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}, "pipeline": {"stages": 2}})", 2) ==
        "ds_config.json: zero_optimization.stage: 2 with pipeline.stages 2: ZeRO-2 and ZeRO-3 are incompatible with "
        "pipeline parallelism (as in DeepSpeed); use stage 0 or 1");
  CHECK(error_of(R"({"train_batch_size": 8, "pipeline": {"stagse": 2}})").starts_with("ds_config.json: pipeline.stagse: unknown key"));
  CHECK(parse(R"({"train_batch_size": 8, "pipeline": {"activation_checkpoint_interval": 1}})")
            .pipeline.activation_checkpoint_interval == 1);
  CHECK(c.pipeline.pipe_partitioned);  // DeepSpeed's defaults: true, true
  CHECK(c.pipeline.grad_partitioned);
  CHECK_FALSE(parse(R"({"train_batch_size": 8, "pipeline": {"grad_partitioned": false}})").pipeline.grad_partitioned);
  CHECK(error_of(R"({"train_batch_size": 8, "pipeline": {"pipe_partitioned": 1}})") ==
        "ds_config.json: pipeline.pipe_partitioned: 1 is not a boolean (true or false)");
}

TEST_CASE("sequence_parallel_size splits the world with the stages and tensor-parallel ranks (DeepSpeed-Ulysses)") {
  auto c = parse(R"({"train_micro_batch_size_per_gpu": 2, "sequence_parallel_size": 2,
                     "tensor_parallel": {"autotp_size": 2}})", 8);
  CHECK(c.sequence_parallel_size == 2);
  CHECK(c.world_size == 2);  // 8 ranks / (2 x 2): the data-parallel size
  CHECK(c.train_batch_size == 4);
  CHECK(error_of(R"({"train_batch_size": 8, "sequence_parallel_size": 3})", 4) ==
        "ds_config.json: sequence_parallel_size: 3 does not divide the world size 4");
  CHECK(error_of(R"({"train_batch_size": 8, "sequence_parallel_size": 2, "pipeline": {"stages": 2}})", 2) ==
        "ds_config.json: sequence_parallel_size: 2 x pipeline.stages 2 does not divide the world size 2");
  CHECK(error_of(R"({"train_batch_size": 8, "sequence_parallel_size": 0})", 2) ==
        "ds_config.json: sequence_parallel_size: 0 must be >= 1");
  CHECK(error_of(R"({"train_batch_size": 7, "sequence_parallel_size": 2})", 4).find(
            "data-parallel size 2 (world size / sequence_parallel_size 2)") != std::string::npos);
}

TEST_CASE("tensor_parallel: autotp_size splits the world with the stages; the split itself is the model's") {
  auto c = parse(R"({"train_batch_size": 16, "gradient_accumulation_steps": 2, "tensor_parallel": {"autotp_size": 2},
                     "pipeline": {"stages": 2}})", 8);
  CHECK(c.tensor_parallel.autotp_size == 2);
  CHECK(c.world_size == 2);  // data-parallel ranks: 8 / (2 x 2)
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK(parse(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 0, "tp_overlap_comm": false}})")
            .tensor_parallel.autotp_size == 1);
  CHECK(error_of(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 3}})", 4) ==
        "ds_config.json: tensor_parallel.autotp_size: 3 x pipeline.stages 1 does not divide the world size 4");
  CHECK(error_of(R"({"train_batch_size": 7, "tensor_parallel": {"autotp_size": 2}})", 4).find(
            "data-parallel size 2 (world size / tensor_parallel.autotp_size 2)") != std::string::npos);
  CHECK(error_of(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2, "partition_config": {}}})", 2) ==
        "ds_config.json: tensor_parallel.partition_config: not supported by dsworker: its models declare their own "
        "split (the gpt plugin's is Megatron's); set autotp_size only");
}

TEST_CASE("optimizer: a misspelt section is reported, and the default optimizer trains") {
  auto c = ds::parse_config(nlohmann::json::parse(R"({"train_batch_size": 8, "optimiser": {"type": "SGD"}})"),
                            "ds_config.json", 1);
  CHECK(c.warnings.at(0) == "ds_config.json: optimiser: unknown key, ignored as DeepSpeed does (did you mean 'optimizer'?)");
  CHECK(c.optimizer.type == ds::OptimizerType::AdamW);
}

TEST_CASE("optimizer: names and DeepSpeed quirks") {
  auto adam = parse(with(R"("optimizer": {"type": "adam", "params": {"lr": 0.01}})"));
  CHECK(adam.optimizer.type == ds::OptimizerType::Adam);
  CHECK(adam.optimizer.lr == 0.01);
  CHECK(std::get<ds::AdamParams>(adam.optimizer.params).adam_w_mode);  // "Adam" is AdamW by default
  auto l2 = parse(with(R"("optimizer": {"type": "Adam", "params": {"adam_w_mode": false}})"));
  CHECK_FALSE(std::get<ds::AdamParams>(l2.optimizer.params).adam_w_mode);
  auto adamw = parse(with(R"("optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}})"));
  CHECK(std::get<ds::AdamParams>(adamw.optimizer.params).adam_w_mode);  // AdamW ignores it
  auto torch_adamw = parse(with(R"("optimizer": {"type": "AdamW", "params": {"torch_adam": true}})"));
  CHECK(std::get<ds::AdamParams>(torch_adamw.optimizer.params).weight_decay == 0.01);  // torch's default
  auto lamb = parse(with(R"("optimizer": {"type": "LAMB", "params": {"max_coeff": 5, "min_coeff": 0.1}})"));
  CHECK(lamb.optimizer.type == ds::OptimizerType::Lamb);
  CHECK(std::get<ds::LambParams>(lamb.optimizer.params).max_coeff == 5.0);
  auto sgd = parse(with(R"("optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}})"));
  CHECK(std::get<ds::SgdParams>(sgd.optimizer.params).nesterov);
  auto lion = parse(with(R"("optimizer": {"type": "Lion", "params": {"lr": 1e-4, "betas": [0.95, 0.98],
                                                                     "weight_decay": 0.1}})"));
  CHECK(lion.optimizer.type == ds::OptimizerType::Lion);
  CHECK(lion.optimizer.lr == 1e-4);
  CHECK(std::get<ds::LionParams>(lion.optimizer.params).beta2 == 0.98);
  CHECK(std::get<ds::LionParams>(lion.optimizer.params).weight_decay == 0.1);
  const auto lion_defaults = std::get<ds::LionParams>(parse(with(R"("optimizer": {"type": "lion"})")).optimizer.params);
  CHECK(lion_defaults.beta1 == 0.9);  // FusedLion's defaults: betas (0.9, 0.999), no decay, lr 1e-3
  CHECK(lion_defaults.beta2 == 0.999);
  CHECK(lion_defaults.weight_decay == 0.0);
  auto adagrad = parse(with(R"("optimizer": {"type": "adagrad", "params": {"lr_decay": 0.01, "eps": 1e-8,
                                                                          "initial_accumulator_value": 0.1}})"));
  CHECK(adagrad.optimizer.type == ds::OptimizerType::Adagrad);
  CHECK(adagrad.optimizer.lr == 1e-2);  // torch's and DeepSpeed's default for Adagrad
  CHECK(std::get<ds::AdagradParams>(adagrad.optimizer.params).lr_decay == 0.01);
  CHECK(std::get<ds::AdagradParams>(adagrad.optimizer.params).eps == 1e-8);
  CHECK(std::get<ds::AdagradParams>(adagrad.optimizer.params).initial_accumulator_value == 0.1);
  CHECK(std::get<ds::AdagradParams>(parse(with(R"("optimizer": {"type": "Adagrad"})")).optimizer.params).eps == 1e-10);
  CHECK(error_of(with(R"("optimizer": {"type": "Adagrad", "params": {"betas": [0.9, 0.99]}})")) ==
        "ds_config.json: optimizer.params.betas: unknown key");
  CHECK(error_of(with(R"("optimizer": {"type": "Lion", "params": {"eps": 1e-8}})")) ==
        "ds_config.json: optimizer.params.eps: unknown key");  // (FusedLion takes none: a TypeError in DeepSpeed)

  auto rmsprop = parse(with(R"("optimizer": {"type": "RMSprop", "params": {"alpha": 0.9, "momentum": 0.5,
                                                                          "centered": true, "foreach": false}})"));
  CHECK(rmsprop.optimizer.type == ds::OptimizerType::RMSprop);
  CHECK(rmsprop.optimizer.lr == 1e-2);  // torch's default
  const auto& r = std::get<ds::RmspropParams>(rmsprop.optimizer.params);
  CHECK(r.alpha == 0.9);
  CHECK(r.momentum == 0.5);
  CHECK(r.centered);
  const auto r_defaults = std::get<ds::RmspropParams>(parse(with(R"("optimizer": {"type": "RMSprop"})")).optimizer.params);
  CHECK(r_defaults.alpha == 0.99);  // torch.optim.RMSprop's defaults
  CHECK(r_defaults.eps == 1e-8);
  CHECK(r_defaults.weight_decay == 0.0);
  CHECK(r_defaults.momentum == 0.0);
  CHECK(!r_defaults.centered);
  CHECK(error_of(with(R"("optimizer": {"type": "RMSprop", "params": {"momentum": -0.1, "maximize": true}})")) ==
        "ds_config.json: optimizer.params.momentum: -0.1 must be >= 0\n"
        "ds_config.json: optimizer.params.maximize: true is not supported by dsworker");
  CHECK(error_of(with(R"("optimizer": {"type": "RMSprop", "params": {"betas": [0.9, 0.99]}})")) ==
        "ds_config.json: optimizer.params.betas: unknown key");

  CHECK(error_of(with(R"("optimizer": {"type": "sgd"})")) ==
        "ds_config.json: optimizer.type: \"sgd\" is not supported by dsworker (supported: Adam, AdamW, Adagrad, RMSprop, "
        "SGD, Lion, Muon, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb) (did you mean 'SGD'?)");
  CHECK(error_of(with(R"("optimizer": {"type": "rmsprop"})")) ==  // a torch.optim class: its exact name, as DeepSpeed
        "ds_config.json: optimizer.type: \"rmsprop\" is not supported by dsworker (supported: Adam, AdamW, Adagrad, "
        "RMSprop, SGD, Lion, Muon, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb) (did you mean 'RMSprop'?)");
  CHECK(error_of(with(R"("optimizer": {"type": "NAdam"})")) ==
        "ds_config.json: optimizer.type: \"NAdam\" is not supported by dsworker (supported: Adam, AdamW, Adagrad, "
        "RMSprop, SGD, Lion, Muon, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb) (did you mean 'Adam'?)");
  CHECK(error_of(with(R"("optimizer": {"params": {"lr": 0.1}})")) ==
        "ds_config.json: optimizer.type: missing (one of Adam, AdamW, Adagrad, RMSprop, SGD, Lion, Muon, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb)");
  CHECK(error_of(with(R"("optimizer": {"type": "Lamb", "params": {"max_grad_norm": 1.0}})")) ==
        "ds_config.json: optimizer.params.max_grad_norm: not supported as an optimizer parameter; use the "
        "top-level 'gradient_clipping'");
  CHECK(error_of(with(R"("optimizer": {"type": "SGD", "params": {"momentum": 0.9, "dampening": 0.1,
                                                                   "nesterov": true}})")) ==
        "ds_config.json: optimizer.params.nesterov: true requires momentum > 0 and dampening 0 (as torch.optim.SGD)");
  CHECK(error_of(with(R"("optimizer": {"type": "Adam", "params": {"amsgrad": true}})")) ==
        "ds_config.json: optimizer.params.amsgrad: true is not supported (FusedAdam has no AMSGrad variant)");
}

TEST_CASE("scheduler: names and required parameters") {
  CHECK(error_of(with(R"("scheduler": {"type": "WarmupCosine", "params": {}})")) ==
        "ds_config.json: scheduler.type: \"WarmupCosine\" is not supported by dsworker (supported: WarmupLR, "
        "WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest, StepLR, MultiStepLR, ConstantLR, LinearLR, "
        "ExponentialLR, PolynomialLR, CosineAnnealingLR, CosineAnnealingWarmRestarts) (did you mean 'WarmupCosineLR'?)");
  CHECK(error_of(with(R"("scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}})")) ==
        "ds_config.json: scheduler.params.total_num_steps: missing (required by WarmupDecayLR)");
  CHECK(error_of(with(R"("scheduler": {"type": "OneCycle", "params": {"cycle_max_lr": 0.1}})")) ==
        "ds_config.json: scheduler.params.cycle_min_lr: missing (required by OneCycle)");
  CHECK(error_of(with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "linaer"}})")) ==
        "ds_config.json: scheduler.params.warmup_type: \"linaer\" is not one of \"log\", \"linear\" "
        "(did you mean 'linear'?)");
  CHECK(error_of(with(R"("scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 5}})")) ==
        "ds_config.json: scheduler.params.last_batch_iteration: 5 is not supported (only -1, a fresh start; "
        "dsworker resumes schedules from checkpoints)");
  CHECK(error_of(with(R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10,
                                                                             "warmup_num_steps": 10}})")) ==
        "ds_config.json: scheduler.params.total_num_steps: 10 equals the warmup length 10; the cosine phase would "
        "be empty");
  CHECK(error_of(with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": [0.1, 0.2]}})")) ==
        "ds_config.json: scheduler.params.warmup_max_lr: [0.1,0.2] has 2 values, one per parameter group; dsworker "
        "trains one group");
  auto one_group = parse(with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": [0.1]}})"));
  CHECK(std::get<ds::WarmupParams>(one_group.scheduler->params).warmup_max_lr == 0.1);
  auto short_total = parse(with(R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 5,
                                                                                   "warmup_num_steps": 10}})"));
  CHECK(short_total.warnings ==
        std::vector<std::string>{"ds_config.json: scheduler.params.total_num_steps: 5 is less than warmup_num_steps 10"});
}

TEST_CASE("scheduler: OneCycle momentum needs betas") {
  const char* one_cycle = R"("scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1}})";
  auto sgd = parse(with(std::string(R"("optimizer": {"type": "SGD", "params": {"lr": 0.1}}, )") + one_cycle));
  CHECK_FALSE(std::get<ds::OneCycleParams>(sgd.scheduler->params).cycle_momentum);
  CHECK(sgd.warnings == std::vector<std::string>{"ds_config.json: scheduler.params.cycle_momentum: disabled: SGD has "
                                                 "no betas (as in DeepSpeed)"});
  for (const char* torch_type : {"Adagrad", "RMSprop"}) {  // (cycling them threw "optimizer has no betas" until 2026-11-30)
    auto other = parse(with(fmt::format(R"("optimizer": {{"type": "{}"}}, )", torch_type) + one_cycle));
    CHECK_FALSE(std::get<ds::OneCycleParams>(other.scheduler->params).cycle_momentum);
    CHECK(other.warnings == std::vector<std::string>{fmt::format(
                                "ds_config.json: scheduler.params.cycle_momentum: disabled: {} has no betas (as in "
                                "DeepSpeed)", torch_type)});
  }
  auto adam = parse(with(std::string(R"("optimizer": {"type": "Adam"}, )") + one_cycle));
  const auto& p = std::get<ds::OneCycleParams>(adam.scheduler->params);
  CHECK(p.cycle_momentum);
  CHECK(p.cycle_second_step_size == 2000);  // null: = cycle_first_step_size
}

TEST_CASE("batch sizes beyond int64 are errors naming the key, not undefined behaviour (found by fuzzing)") {
  CHECK(error_of(R"({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4444444444444444444444444444442})") ==
        "ds_config.json: gradient_accumulation_steps: 4.444444444444444e+30 is not an integer");
  CHECK(error_of(R"({"train_batch_size": 1e19, "train_micro_batch_size_per_gpu": 8})") ==
        "ds_config.json: train_batch_size: 1e+19 is not an integer");
}

TEST_CASE("offload_param to nvme: stage 3 only (ignored below with a warning), a path, and not with bf16 master weights") {
  CHECK(error_of(with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}})")) ==
        "no error");
  CHECK(warnings_of(with(R"("zero_optimization": {"stage": 2, "offload_param": {"device": "nvme"}})")) ==
        "ds_config.json: zero_optimization.offload_param: ignored at ZeRO stage 2, as DeepSpeed ignores it (parameters "
        "are offloaded at stage 3 only)");
  CHECK(error_of(with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}})")) ==
        "ds_config.json: zero_optimization.offload_param.nvme_path: required with device \"nvme\": the directory for "
        "the parameters' swap file");
  CHECK(error_of(with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp",
                                                                              "buffer_count": 0}})")) ==
        "ds_config.json: zero_optimization.offload_param.buffer_count: 0 must be at least 1");
  CHECK(error_of(with(R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
                         "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}})")) ==
        "ds_config.json: zero_optimization.offload_param.device: \"nvme\" keeps an fp32 master copy apart from the "
        "swapped parameters, which bf16.bf16_master_weights_and_grads does without; use one or the other");
}

// MuonWithAuxAdam's two groups from one params block: lr for both unless muon_lr / adam_lr say otherwise, the code's
// defaults (0.02 and 3e-4, not the docs' 0.001), and the keys DeepSpeed would drop without a word refused.
TEST_CASE("optimizer Muon: the two groups' learning rates, defaults, and what it refuses") {
  const auto defaults = parse(with(R"("optimizer": {"type": "muon"})")).optimizer;
  CHECK(defaults.type == ds::OptimizerType::Muon);
  CHECK(defaults.lr == 0.02);
  const auto& d = std::get<ds::MuonParams>(defaults.params);
  CHECK(d.adam_lr == 3e-4);
  CHECK(d.momentum == 0.95);
  CHECK(d.weight_decay == 0.0);
  CHECK(d.beta1 == 0.9);
  CHECK(d.beta2 == 0.95);
  CHECK(d.eps == 1e-10);
  const auto one_lr = parse(with(R"("optimizer": {"type": "Muon", "params": {"lr": 0.01}})")).optimizer;
  CHECK(one_lr.lr == 0.01);
  CHECK(std::get<ds::MuonParams>(one_lr.params).adam_lr == 0.01);  // (DeepSpeed gives both groups `lr`)
  const auto both = parse(with(R"("optimizer": {"type": "Muon", "params": {"lr": 0.01, "muon_lr": 0.03, "adam_lr": 1e-3,
      "momentum": 0.9, "betas": [0.8, 0.9], "eps": 1e-8, "weight_decay": 0.1, "ns_method": "standard"}})")).optimizer;
  CHECK(both.lr == 0.03);
  CHECK(std::get<ds::MuonParams>(both.params).adam_lr == 1e-3);
  CHECK(std::get<ds::MuonParams>(both.params).momentum == 0.9);
  CHECK(std::get<ds::MuonParams>(both.params).beta1 == 0.8);
  CHECK(std::get<ds::MuonParams>(both.params).weight_decay == 0.1);

  CHECK(error_of(with(R"("optimizer": {"type": "Muon", "params": {"nesterov": false}})")) ==
        "ds_config.json: optimizer.params.nesterov: unknown key");
  CHECK(error_of(with(R"("optimizer": {"type": "Muon", "params": {"ns_method": "svd"}})")).find("ns_method") !=
        std::string::npos);
  CHECK(error_of(with(R"("optimizer": {"type": "Muon", "params": {"momentum": 1.0}})")) ==
        "ds_config.json: optimizer.params.momentum: 1 must be < 1");
  CHECK(error_of(with(R"("optimizer": {"type": "Muon", "params": {"lr": 0}})")).find("optimizer.params.lr: 0 must be > 0") !=
        std::string::npos);
  CHECK(error_of(with(R"("optimizer": {"type": "Muon"}, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}})"))
            .find("zero_optimization.offload_optimizer.device: nvme: optimizer Muon") != std::string::npos);
  CHECK(error_of(with(R"("optimizer": {"type": "Muon"}, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
      "zero_optimization": {"stage": 1})"))
            .find("bf16.bf16_master_weights_and_grads: true: optimizer Muon") != std::string::npos);
  CHECK(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Muon"}, "tensor_parallel": {"autotp_size": 2}})", 2)
            .find("tensor_parallel.autotp_size: 2: optimizer Muon") != std::string::npos);
}
