// The rules that let configs written for DeepSpeed and the Hugging Face Trainer run unchanged: "auto"
// values filled as the Trainer fills them (from TrainerArgs or its defaults), the default optimizer
// of a config without one, DeepSpeed 0.19's defaults, every problem reported in one run, JSON
// messages with lines, torch_autocast and the refusals --print_config must show.
#include <cstdio>
#include <fstream>

#include <doctest/doctest.h>

#include "config_test_util.h"

using ds::test::error_of;

namespace {

ds::DsConfig with_args(const std::string& text, const ds::TrainerArgs& args, int world_size = 1) {
  return ds::parse_config(nlohmann::json::parse(text), "ds_config.json", world_size, args);
}

std::string errors_with_args(const std::string& text, const ds::TrainerArgs& args) {
  try {
    with_args(text, args);
  } catch (const ds::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

bool has_note(const ds::DsConfig& c, const std::string& text) {
  for (const auto& n : c.notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

const char* kHfZero3 = R"({
  "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                           "total_num_steps": "auto"}},
  "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
                        "offload_param": {"device": "cpu", "pin_memory": true}, "overlap_comm": true,
                        "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                        "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                        "stage3_gather_16bit_weights_on_model_save": true},
  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
  "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": false
})";

}  // namespace

TEST_CASE("auto: the Hugging Face Trainer's defaults") {
  ds::TrainerArgs args;
  args.hidden_size = [](const nlohmann::json&) { return std::optional<int64_t>(768); };
  args.total_steps = 500;
  auto c = with_args(kHfZero3, args, 2);
  CHECK(c.train_micro_batch_size_per_gpu == 8);
  CHECK(c.gradient_accumulation_steps == 1);
  CHECK(c.train_batch_size == 16);
  CHECK(c.gradient_clipping == 1.0);
  CHECK(c.optimizer.lr == 5e-5);
  const auto& adam = std::get<ds::AdamParams>(c.optimizer.params);
  CHECK(adam.beta1 == 0.9);
  CHECK(adam.beta2 == 0.999);
  CHECK(adam.eps == 1e-8);
  CHECK(adam.weight_decay == 0.0);
  const auto& w = std::get<ds::WarmupParams>(c.scheduler->params);
  CHECK(w.warmup_min_lr == 0.0);
  CHECK(w.warmup_max_lr == 5e-5);
  CHECK(w.warmup_num_steps == 0);
  CHECK(w.total_num_steps == 500);
  CHECK_FALSE(c.scheduler_total_steps_auto);
  CHECK_FALSE(c.fp16.enabled);
  CHECK_FALSE(c.bf16.enabled);
  CHECK(c.zero_optimization.reduce_bucket_size == 768 * 768);
  CHECK(c.zero_optimization.prefetch_bucket_size == 530841);  // int(0.9 * 768^2)
  CHECK(c.zero_optimization.param_persistence_threshold == 7680);
  CHECK(has_note(c, "ds_config.json: train_batch_size: \"auto\" -> 16 (world size 2 x micro batch 8 x accumulation 1)"));
  CHECK(has_note(c, "zero_optimization.reduce_bucket_size: \"auto\" -> 589824 (the model's hidden size 768 squared)"));
}

TEST_CASE("auto: from the trainer's arguments") {
  ds::TrainerArgs args;
  args.micro_batch = 4;
  args.grad_accum = 2;
  args.lr = 3e-4;
  args.weight_decay = 0.1;
  args.warmup_steps = 20;
  args.bf16 = true;
  args.hidden_size = [](const nlohmann::json& model) { return std::optional<int64_t>(model.value("n_embd", 0)); };
  nlohmann::json root = nlohmann::json::parse(kHfZero3);
  root["model"] = {{"n_embd", 64}};
  auto c = ds::parse_config(root, "ds_config.json", 4, args);
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK(c.gradient_accumulation_steps == 2);
  CHECK(c.train_batch_size == 32);
  CHECK(c.optimizer.lr == 3e-4);
  CHECK(std::get<ds::AdamParams>(c.optimizer.params).weight_decay == 0.1);
  CHECK(std::get<ds::WarmupParams>(c.scheduler->params).warmup_max_lr == 3e-4);
  CHECK(std::get<ds::WarmupParams>(c.scheduler->params).warmup_num_steps == 20);
  CHECK(c.scheduler_total_steps_auto);  // no run length yet: the caller sets it
  CHECK(c.bf16.enabled);
  CHECK(c.zero_optimization.reduce_bucket_size == 4096);
  CHECK(has_note(c, "optimizer.params.lr: \"auto\" -> 0.0003 (from --lr)"));
}

TEST_CASE("auto: a number in the config that disagrees with a given flag is an error") {
  ds::TrainerArgs args;
  args.micro_batch = 4;
  args.lr = 1e-4;
  CHECK(errors_with_args(R"({"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "Adam", "params": {"lr": 0.001}}})",
                         args) ==
        "ds_config.json: train_micro_batch_size_per_gpu: 8 in the config, but --train_micro_batch_size_per_gpu says 4; "
        "make them agree or write \"auto\"\n"
        "ds_config.json: optimizer.params.lr: 0.001 in the config, but --lr says 0.0001; make them agree or write \"auto\"");
  // Without the flag the config's numbers stand, and "auto" batch sizes are derived from them.
  auto c = with_args(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3, "train_batch_size": "auto",
                         "optimizer": {"type": "Adam"}})",
                     {}, 2);
  CHECK(c.train_batch_size == 12);
}

TEST_CASE("auto: ZeRO sizes without a hidden size keep DeepSpeed's defaults, with a warning") {
  auto c = with_args(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"},
                         "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})", {});
  CHECK(c.zero_optimization.reduce_bucket_size == 500000000);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0] == "ds_config.json: zero_optimization.reduce_bucket_size: \"auto\" needs the model's hidden size "
                         "(give --model); DeepSpeed's default applies");
  // stage3_* "auto" at stage 2 is dropped (DeepSpeed's pydantic model), not derived.
  ds::TrainerArgs args;
  args.hidden_size = [](const nlohmann::json&) { return std::optional<int64_t>(100); };
  auto s2 = with_args(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"},
                          "zero_optimization": {"stage": 2, "stage3_prefetch_bucket_size": "auto"}})", args);
  CHECK(s2.zero_optimization.prefetch_bucket_size == 50000000);
}

TEST_CASE("no optimizer section: AdamW with torch's defaults") {
  auto c = with_args(R"({"train_batch_size": 8})", {});
  CHECK(c.optimizer.type == ds::OptimizerType::AdamW);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(std::get<ds::AdamParams>(c.optimizer.params).weight_decay == 0.01);
  CHECK(std::get<ds::AdamParams>(c.optimizer.params).adam_w_mode);
  CHECK(has_note(c, "ds_config.json: optimizer: no optimizer section: AdamW with lr 0.001 (torch.optim.AdamW's default)"));
  // The scheduler's peak lr, else --lr (which wins).
  const char* one_cycle = R"({"train_batch_size": 8,
                              "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.02}}})";
  auto s = with_args(one_cycle, {});
  CHECK(s.optimizer.lr == 0.02);
  ds::TrainerArgs args;
  args.lr = 0.005;
  args.weight_decay = 0.0;
  auto f = with_args(one_cycle, args);
  CHECK(f.optimizer.lr == 0.005);
  CHECK(std::get<ds::AdamParams>(f.optimizer.params).weight_decay == 0.0);
}

TEST_CASE("defaults: DeepSpeed 0.19's") {
  auto c = with_args(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"}, "bf16": {"enabled": true},
                         "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                               "offload_param": {"device": "cpu"}}})", {});
  CHECK(c.gradient_clipping == 1.0);  // 0.19.3
  CHECK(c.bf16.check_grad_overflow);  // 0.19.3
  CHECK(c.zero_optimization.offload_optimizer->pin_memory);  // 0.19.5
  CHECK(c.zero_optimization.offload_param->pin_memory);
  CHECK(has_note(c, "offload_optimizer: device \"cpu\": on CPU ranks the optimizer state already lives in host memory"));
}

TEST_CASE("all problems at once") {
  const std::string text = R"({
    "train_batch_size": 16,
    "optimizer": {"type": "Adam", "params": {"lr": -1, "betaz": [0.9, 0.99]}},
    "fp16": {"enabled": "yes", "loss_scale_windw": 100},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}, "reduce_bucket_sz": 5},
    "gradient_clipping": "abc", "cuda_visible_devices": "0,1", "sequence_parallel_size": 2
  })";
  try {
    ds::parse_config(nlohmann::json::parse(text), "ds_config.json", 1);
    FAIL("no error");
  } catch (const ds::ConfigErrors& e) {
    CHECK(e.errors == std::vector<std::string>{
                          "ds_config.json: gradient_clipping: \"abc\" is not a number",
                          "ds_config.json: optimizer.params.lr: -1 must be >= 0",
                          "ds_config.json: optimizer.params.betaz: unknown key (did you mean 'betas'?)",
                          "ds_config.json: fp16.enabled: \"yes\" is not a boolean (true or false)",
                          "ds_config.json: fp16.loss_scale_windw: unknown key (did you mean 'loss_scale_window'?)",
                          "ds_config.json: zero_optimization.reduce_bucket_sz: unknown key (did you mean "
                          "'reduce_bucket_size'?)",
                          "ds_config.json: sequence_parallel_size: 2 does not divide the world size 1",
                          "ds_config.json: zero_optimization.offload_optimizer.nvme_path: required with device "
                          "\"nvme\": the directory for the swap files"});
    CHECK(e.warnings == std::vector<std::string>{"ds_config.json: cuda_visible_devices: unknown key, ignored as "
                                                 "DeepSpeed does"});
  }
}

TEST_CASE("json files: messages carry the line of the key") {
  const std::string path = "/tmp/ds_trainer_rules_test.json";
  std::ofstream(path) << "{\n  // a comment with \"quotes\" and {braces}\n  \"train_batch_size\": 8,\n"
                         "  \"optimizer\": {\"type\": \"Adam\",\n    \"params\": {\"lr\": 0.1,\n      \"betaz\": [0.9]}},\n"
                         "  /* block\n comment */ \"zero_optimization\": {\"stage\": 7}\n}\n";
  try {
    ds::load_config(path, 1);
    FAIL("no error");
  } catch (const ds::ConfigError& e) {
    CHECK(std::string(e.what()) == path + ":6: optimizer.params.betaz: unknown key (did you mean 'betas'?)\n" + path +
                                       ":8: zero_optimization.stage: 7 is not one of 0, 1, 2, 3");
  }
  std::remove(path.c_str());
}

TEST_CASE("torch_autocast: dsworker's 16-bit compute") {
  auto bf16 = with_args(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"}, "torch_autocast": {"enabled": true}})", {});
  CHECK(bf16.bf16.enabled);  // dtype None: torch.autocast's CPU default
  CHECK(bf16.model_dtype() == ds::Dtype::bf16);
  auto fp16 = with_args(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"},
                            "torch_autocast": {"enabled": true, "dtype": "torch.float16"}})", {});
  CHECK(fp16.fp16.enabled);
  CHECK(error_of(R"({"train_batch_size": 8, "torch_autocast": {"enabled": true}, "bf16": {"enabled": true}})") ==
        "ds_config.json: torch_autocast.enabled: true cannot be combined with bf16.enabled (DeepSpeed refuses it too)");
  CHECK(error_of(R"({"train_batch_size": 8, "torch_autocast": {"enabled": true, "dtype": "int8"}})").find(
            "torch_autocast.dtype: \"int8\" is not one of") != std::string::npos);
}

TEST_CASE("bf16 master weights and optimizer states: DeepSpeed's rules") {
  const std::string stage2 = R"("train_batch_size": 8, "zero_optimization": {"stage": 2}, )";
  auto both = ds::test::parse(
      "{" + stage2 + R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}})");
  CHECK(both.bf16.master_weights_and_grads);
  CHECK(both.bf16.optimizer_states);
  CHECK(both.grad_accum_dtype == ds::Dtype::bf16);
  CHECK(error_of(R"({"train_batch_size": 8, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true}})") ==
        "ds_config.json: bf16.bf16_master_weights_and_grads: true is only supported with ZeRO stage 1, 2 or 3 (as in "
        "DeepSpeed), not stage 0");
  CHECK(error_of("{" + stage2 + R"("bf16": {"enabled": true, "bf16_optimizer_states": true}})") ==
        "ds_config.json: bf16.bf16_optimizer_states: true needs bf16.bf16_master_weights_and_grads true (as in "
        "DeepSpeed)");
  CHECK(error_of("{" + stage2 + R"("bf16": {"bf16_master_weights_and_grads": true}})") ==
        "ds_config.json: bf16.bf16_master_weights_and_grads: true needs bf16.enabled true");
  CHECK(error_of("{" + stage2 + R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
                                   "data_types": {"grad_accum_dtype": "fp16"}})") ==
        "ds_config.json: data_types.grad_accum_dtype: \"fp16\" cannot hold the gradients of bf16 master weights; use "
        "bf16 or fp32");
}

TEST_CASE("refusals and keys dsworker accepts beside DeepSpeed's") {
  CHECK(error_of(R"({"train_batch_size": 8, "gradient_allreduce_op": "sum"})") ==
        "ds_config.json: gradient_allreduce_op: \"sum\" is not supported by dsworker (unaveraged gradients; dsworker "
        "averages them)");
  CHECK(error_of(R"({"train_batch_size": 8, "data_types": {"param_dtype": "bf16"}})") ==
        "ds_config.json: data_types.param_dtype: \"bf16\" differs from the model's precision fp32 (fp16/bf16.enabled)");
  CHECK(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "zenflow": {}}})") ==
        "ds_config.json: zero_optimization.zenflow: not supported by dsworker (ZenFlow stall-free offloading)");
  CHECK(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "compute_grad_norm": false}})") ==
        "ds_config.json: zero_optimization.compute_grad_norm: false is supported only with ZeRO stage 1 or 2 (stage is 3)");
  CHECK(error_of(R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": 0}})") ==
        "ds_config.json: zero_optimization.reduce_bucket_size: 0 must be >= 1");  // DeepSpeed 0.19.8: > 0
  CHECK(error_of(R"({"train_batch_size": 8, "sequence_parallel_size": 1, "managed_gradient_accumulation": true,
                     "gradient_allreduce_op": "mean", "log_level": "info"})") == "no error");
}

TEST_CASE("tensorboard: DeepSpeed's block, validated like its pydantic model") {
  auto c = with_args(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"},
                         "tensorboard": {"enabled": true, "output_path": "logs", "job_name": "run1"}})", {});
  CHECK(c.tensorboard.enabled);
  CHECK(c.tensorboard.output_path == "logs");
  CHECK(c.tensorboard.job_name == "run1");
  CHECK(c.warnings.empty());
  CHECK(with_args(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"}, "tensorboard": {"enabled": true}})", {})
            .tensorboard.job_name == "DeepSpeedJobName");
  CHECK(error_of(R"({"train_batch_size": 8, "tensorboard": {"enabled": true, "outputpath": "x"}})") ==
        "ds_config.json: tensorboard.outputpath: unknown key (did you mean 'output_path'?)");
}
