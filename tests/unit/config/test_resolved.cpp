// resolved_json: every default filled in (DeepSpeed's code defaults), the derived values resolved,
// and the output itself a config that parses back to the same thing.
#include <doctest/doctest.h>

#include "config_test_util.h"

using ds::test::parse;

TEST_CASE("resolved json: defaults of a minimal config") {
  auto r = ds::resolved_json(parse(R"({"train_batch_size": 8})", 2));
  CHECK(r["train_batch_size"] == 8);
  CHECK(r["train_micro_batch_size_per_gpu"] == 4);
  CHECK(r["gradient_accumulation_steps"] == 1);
  CHECK(r["steps_per_print"].is_null());  // code default (docs: 10)
  CHECK(r["gradient_clipping"] == 1.0);   // DeepSpeed >= 0.19.3 (0.0 before)
  CHECK(r["wall_clock_breakdown"] == false);
  CHECK(r["seed"] == 42);
  CHECK(r["prescale_gradients"] == false);
  CHECK(r["gradient_predivide_factor"] == 1.0);
  CHECK(r["communication_data_type"] == "fp32");
  CHECK(r["optimizer"]["type"] == "Adam");  // the helper's {"type": "Adam"}, filled in:
  CHECK(r["optimizer"]["params"]["lr"] == 0.001);
  CHECK(r["optimizer"]["params"]["betas"] == nlohmann::ordered_json::array({0.9, 0.999}));
  CHECK(r["optimizer"]["params"]["eps"] == 1e-8);
  CHECK(r["optimizer"]["params"]["weight_decay"] == 0.0);
  CHECK(r["optimizer"]["params"]["bias_correction"] == true);
  CHECK(r["optimizer"]["params"]["adam_w_mode"] == true);
  CHECK(r["optimizer"]["params"]["torch_adam"] == false);
  CHECK(r["scheduler"].is_null());
  CHECK(r["fp16"]["enabled"] == false);
  CHECK(r["fp16"]["loss_scale"] == 0.0);
  CHECK(r["fp16"]["initial_scale_power"] == 16);
  CHECK(r["fp16"]["loss_scale_window"] == 1000);
  CHECK(r["fp16"]["hysteresis"] == 2);
  CHECK(r["fp16"]["min_loss_scale"] == 1.0);
  CHECK(r["bf16"]["enabled"] == false);
  CHECK(r["data_types"]["grad_accum_dtype"] == "fp32");
  const auto& z = r["zero_optimization"];
  CHECK(z["stage"] == 0);
  CHECK(z["contiguous_gradients"] == true);
  CHECK(z["reduce_bucket_size"] == 500000000);
  CHECK(z["allgather_bucket_size"] == 500000000);
  CHECK(z["overlap_comm"] == false);
  CHECK(z["offload_optimizer"].is_null());
  CHECK(z["sub_group_size"] == 1000000000);                  // code default (docs: 1e12)
  CHECK(z["stage3_prefetch_bucket_size"] == 50000000);       // code default (docs: 5e8)
  CHECK(z["stage3_param_persistence_threshold"] == 100000);
  CHECK(z["stage3_model_persistence_threshold"] == INT64_MAX);
  CHECK(z["stage3_max_live_parameters"] == 1000000000);
  CHECK(z["mics_shard_size"] == -1);
  CHECK(r["comms_logger"]["prof_all"] == true);
  CHECK(r["comms_logger"]["prof_ops"] == nlohmann::ordered_json::array());
  CHECK(r["csv_monitor"]["job_name"] == "DeepSpeedJobName");
  CHECK(r["activation_checkpointing"]["number_checkpoints"].is_null());
  CHECK(r["checkpoint"]["dir"] == "");
  CHECK(r["checkpoint"]["save_interval"] == 0);
  CHECK(r["checkpoint"]["keep_last"] == 0);
  CHECK(r["checkpoint"]["tag_validation"] == "Warn");
  CHECK(r["model"] == nlohmann::ordered_json::object());
  CHECK(r["data"] == nlohmann::ordered_json::object());
}

TEST_CASE("resolved json: optimizer and scheduler defaults") {
  auto r = ds::resolved_json(parse(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"},
                                       "scheduler": {"type": "OneCycle",
                                                     "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01}}})"));
  CHECK(r["optimizer"]["type"] == "Lamb");
  const auto& p = r["optimizer"]["params"];
  CHECK(p["lr"] == 0.001);
  CHECK(p["betas"] == nlohmann::ordered_json::array({0.9, 0.999}));
  CHECK(p["eps"] == 1e-8);
  CHECK(p["max_coeff"] == 10.0);
  CHECK(p["min_coeff"] == 0.01);
  CHECK(p["bias_correction"] == true);
  const auto& s = r["scheduler"]["params"];
  CHECK(s["cycle_first_step_size"] == 2000.0);
  CHECK(s["cycle_second_step_size"] == 2000.0);
  CHECK(s["cycle_min_mom"] == 0.8);
  CHECK(s["cycle_max_mom"] == 0.9);
  CHECK(s["decay_step_size"] == 0.0);
}

TEST_CASE("resolved json: dtype defaults follow precision and stage") {
  auto fp16 = parse(R"({"train_batch_size": 8, "fp16": {"enabled": true}})");
  CHECK(fp16.communication_data_type == ds::Dtype::fp16);
  CHECK(fp16.grad_accum_dtype == ds::Dtype::fp16);
  auto bf16 = parse(R"({"train_batch_size": 8, "bf16": {"enabled": true}})");
  CHECK(bf16.grad_accum_dtype == ds::Dtype::fp32);  // bf16 without ZeRO accumulates in fp32
  CHECK(bf16.communication_data_type == ds::Dtype::fp32);  // and reduces what it accumulates
  auto bf16_zero = parse(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}})");
  CHECK(bf16_zero.grad_accum_dtype == ds::Dtype::bf16);
  CHECK(bf16_zero.communication_data_type == ds::Dtype::bf16);
  auto explicit_types = parse(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "communication_data_type": "BF16",
                                  "data_types": {"grad_accum_dtype": "bf16"}})");
  CHECK(explicit_types.communication_data_type == ds::Dtype::bf16);  // case-insensitive, as DeepSpeed
  CHECK(explicit_types.grad_accum_dtype == ds::Dtype::bf16);
  // Reducing in another type than the accumulation's is refused while parsing (so --print_config says so).
  CHECK(ds::test::error_of(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "communication_data_type": "FP32",
                               "data_types": {"grad_accum_dtype": "bf16"}})") ==
        "ds_config.json: communication_data_type: fp32: gradients are reduced in the type they accumulate in "
        "(data_types.grad_accum_dtype, here bf16); another type is not implemented");
}

TEST_CASE("resolved json: parses back to itself") {
  auto c = parse(R"({
    "train_batch_size": 64, "gradient_accumulation_steps": 2, "steps_per_print": 10, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000, "warmup_num_steps": 100}},
    "fp16": {"enabled": true, "initial_scale_power": 12},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
                          "zeropp_loco_param": {"err_beta": 0.5}},
    "comms_logger": {"enabled": true, "prof_ops": ["all_reduce"]},
    "checkpoint": {"dir": "ckpt", "save_interval": 100, "keep_last": 3, "tag_validation": "fail"},
    "model": {"hidden": [64, 64]}, "data": {"path": "train.bin"}})",
                 4);
  auto first = ds::resolved_json(c);
  auto again = ds::resolved_json(ds::parse_config(nlohmann::json(first), "resolved", 4));
  CHECK(first.dump() == again.dump());
  CHECK(first["checkpoint"]["tag_validation"] == "Fail");
  CHECK(first["zero_optimization"]["overlap_comm"] == true);
  CHECK(first["zero_optimization"]["offload_optimizer"]["buffer_count"] == 4);
  CHECK(first["model"]["hidden"] == nlohmann::ordered_json::array({64, 64}));
}

TEST_CASE("legacy spellings convert") {
  auto c = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "cpu_offload": true,
                     "stage3_gather_fp16_weights_on_model_save": true, "prefetch_bucket_size": 1000}})");
  REQUIRE(c.zero_optimization.offload_optimizer);
  CHECK(c.zero_optimization.offload_optimizer->device == ds::OffloadDevice::cpu);
  CHECK(c.zero_optimization.gather_16bit_weights_on_model_save);
  CHECK(c.zero_optimization.prefetch_bucket_size == 1000);  // field name and stage3_ alias both accepted
  CHECK(c.warnings.size() == 2);                             // two deprecated keys
  CHECK(ds::test::error_of(R"({"train_batch_size": 8, "zero_optimization": {"prefetch_bucket_size": 1,
                                                                           "stage3_prefetch_bucket_size": 2}})") ==
        "ds_config.json: zero_optimization.stage3_prefetch_bucket_size: given together with 'prefetch_bucket_size'; "
        "keep one");
}
