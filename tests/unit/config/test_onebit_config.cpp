// The 1-bit optimizers' config: DeepSpeed's type names (compared lower-case), its defaults, every
// key validated with the key path and value in the message, the ignored backend keys, and the checks
// against other sections (ZeRO stage 0; 1-bit LAMB needs a dynamic loss scale under fp16).
#include <doctest/doctest.h>

#include "config_test_util.h"

using ds::test::error_of;
using ds::test::parse;
using ds::test::warnings_of;

namespace {

std::string with(const std::string& extra) { return R"({"train_batch_size": 8, )" + extra + "}"; }

std::string optimizer(const std::string& type, const std::string& params) {
  return with(R"("optimizer": {"type": ")" + type + R"(", "params": {)" + params + "}}");
}

}  // namespace

TEST_CASE("1-bit optimizers: DeepSpeed's names case-insensitively, and its defaults") {
  auto adam = parse(optimizer("onebitadam", ""));
  CHECK(adam.optimizer.type == ds::OptimizerType::OneBitAdam);
  const auto& a = std::get<ds::OneBitAdamParams>(adam.optimizer.params);
  CHECK(a.freeze_step == 100000);
  CHECK(a.beta1 == 0.9);
  CHECK(a.beta2 == 0.999);
  CHECK(a.eps == 1e-8);
  CHECK(a.weight_decay == 0.0);
  CHECK(a.comm_backend_name == "nccl");
  CHECK(adam.optimizer.lr == 1e-3);

  auto zo = parse(optimizer("ZeroOneAdam", ""));
  const auto& z = std::get<ds::ZeroOneAdamParams>(zo.optimizer.params);
  CHECK(z.var_freeze_step == 100000);
  CHECK(z.var_update_scaler == 16);
  CHECK(z.local_step_scaler == 32678);
  CHECK(z.local_step_clipper == 16);

  auto lamb = parse(optimizer("OneBitLAMB", ""));
  CHECK(lamb.optimizer.type == ds::OptimizerType::OneBitLamb);
  const auto& l = std::get<ds::OneBitLambParams>(lamb.optimizer.params);
  CHECK(l.freeze_step == 100000);
  CHECK(l.max_coeff == 10.0);
  CHECK(l.min_coeff == 0.01);
  CHECK(l.coeff_beta == 0.9);
  CHECK(l.factor_max == 4.0);
  CHECK(l.factor_min == 0.5);
  CHECK(l.factor_threshold == 0.1);
}

TEST_CASE("1-bit optimizers: every key read") {
  auto adam = parse(optimizer("OneBitAdam", R"("lr": 0.01, "freeze_step": 40, "betas": [0.8, 0.99], "eps": 1e-6,
      "weight_decay": 0.1, "bias_correction": false, "eps_inside_sqrt": true, "amsgrad": false)"));
  const auto& a = std::get<ds::OneBitAdamParams>(adam.optimizer.params);
  CHECK(adam.optimizer.lr == 0.01);
  CHECK(a.freeze_step == 40);
  CHECK(a.beta1 == 0.8);
  CHECK(a.eps == 1e-6);
  CHECK(a.weight_decay == 0.1);
  auto zo = parse(optimizer("ZeroOneAdam", R"("var_freeze_step": 7, "var_update_scaler": 2, "local_step_scaler": 3,
      "local_step_clipper": 4)"));
  const auto& z = std::get<ds::ZeroOneAdamParams>(zo.optimizer.params);
  CHECK(z.var_freeze_step == 7);
  CHECK(z.var_update_scaler == 2);
  CHECK(z.local_step_scaler == 3);
  CHECK(z.local_step_clipper == 4);
  auto lamb = parse(optimizer("OneBitLamb", R"("freeze_step": 9, "max_coeff": 3, "min_coeff": 0.2, "coeff_beta": 0.5,
      "factor_max": 2, "factor_min": 0.25, "factor_threshold": 0.3)"));
  const auto& l = std::get<ds::OneBitLambParams>(lamb.optimizer.params);
  CHECK(l.freeze_step == 9);
  CHECK(l.max_coeff == 3.0);
  CHECK(l.min_coeff == 0.2);
  CHECK(l.coeff_beta == 0.5);
  CHECK(l.factor_max == 2.0);
  CHECK(l.factor_min == 0.25);
  CHECK(l.factor_threshold == 0.3);
  auto resolved = ds::resolved_json(lamb);
  CHECK(resolved["optimizer"]["type"] == "OneBitLamb");
  CHECK(resolved["optimizer"]["params"]["factor_threshold"] == 0.3);
  CHECK(resolved["optimizer"]["params"]["freeze_step"] == 9);
  CHECK(parse(resolved.dump()).optimizer.type == ds::OptimizerType::OneBitLamb);  // itself a valid config
}

TEST_CASE("1-bit optimizers: bad values name the key and the value") {
  CHECK(error_of(optimizer("OneBitAdam", R"("freeze_step": -1)")) ==
        "ds_config.json: optimizer.params.freeze_step: -1 must be >= 0");
  CHECK(error_of(optimizer("OneBitAdam", R"("freeze_step": 1.5)")) ==
        "ds_config.json: optimizer.params.freeze_step: 1.5 is not an integer");
  CHECK(error_of(optimizer("OneBitAdam", R"("amsgrad": true)")) ==
        "ds_config.json: optimizer.params.amsgrad: true is not supported (OnebitAdam has no AMSGrad variant)");
  CHECK(error_of(optimizer("OneBitAdam", R"("comm_backend_name": "gloo")")) ==
        "ds_config.json: optimizer.params.comm_backend_name: \"gloo\" is not one of \"nccl\", \"mpi\", \"hccl\", "
        "\"compressed\"");
  CHECK(error_of(optimizer("OneBitAdam", R"("freez_step": 10)")) ==
        "ds_config.json: optimizer.params.freez_step: unknown key (did you mean 'freeze_step'?)");
  CHECK(error_of(optimizer("ZeroOneAdam", R"("var_update_scaler": 0)")) ==
        "ds_config.json: optimizer.params.var_update_scaler: 0 must be >= 1");
  CHECK(error_of(optimizer("ZeroOneAdam", R"("local_step_clipper": 0)")) ==
        "ds_config.json: optimizer.params.local_step_clipper: 0 must be >= 1");
  CHECK(error_of(optimizer("ZeroOneAdam", R"("freeze_step": 10)")) ==
        "ds_config.json: optimizer.params.freeze_step: unknown key");  // 0/1 Adam's is var_freeze_step
  CHECK(error_of(optimizer("OneBitLamb", R"("coeff_beta": 1.0)")) ==
        "ds_config.json: optimizer.params.coeff_beta: 1 must be < 1");
  CHECK(error_of(optimizer("OneBitLamb", R"("factor_min": 5)")) ==
        "ds_config.json: optimizer.params.factor_min: 5 is larger than factor_max 4");
  CHECK(error_of(optimizer("OneBitLamb", R"("factor_threshold": -0.1)")) ==
        "ds_config.json: optimizer.params.factor_threshold: -0.1 must be >= 0");
  CHECK(error_of(optimizer("OneBitLamb", R"("betas": [0.9, 1.0])")) ==
        "ds_config.json: optimizer.params.betas: [0.9,1.0] must lie in [0, 1)");
}

TEST_CASE("1-bit optimizers: cuda_aware and comm_backend_name are accepted and ignored with a warning") {
  const std::string w = warnings_of(optimizer("OneBitAdam", R"("cuda_aware": true, "comm_backend_name": "mpi")"));
  CHECK(w.find("optimizer.params.cuda_aware: ignored: dsworker compresses over its own Gloo process group") !=
        std::string::npos);
  CHECK(w.find("optimizer.params.comm_backend_name: ignored") != std::string::npos);
}

TEST_CASE("1-bit optimizers: ZeRO stage 0 only, and 1-bit LAMB needs dynamic loss scaling under fp16") {
  CHECK(error_of(with(R"("optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 1})")) ==
        "ds_config.json: zero_optimization.stage: 1: optimizer OneBitAdam needs stage 0 (it compresses the whole "
        "momentum on every rank; DeepSpeed refuses ZeRO with it too)");
  CHECK(error_of(with(R"("optimizer": {"type": "ZeroOneAdam"}, "zero_optimization": {"stage": 3})")).find(
            "zero_optimization.stage: 3: optimizer ZeroOneAdam needs stage 0") != std::string::npos);
  CHECK(error_of(with(R"("optimizer": {"type": "OneBitLamb"}, "zero_optimization": {"stage": 2})")).find(
            "zero_optimization.stage: 2: optimizer OneBitLamb needs stage 0") != std::string::npos);
  CHECK(error_of(with(R"("optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 0})")) == "no error");
  CHECK(error_of(with(R"("optimizer": {"type": "OneBitLamb"}, "fp16": {"enabled": true, "loss_scale": 128})")) ==
        "ds_config.json: fp16.loss_scale: 128: optimizer OneBitLamb needs dynamic loss scaling (loss_scale 0), as "
        "DeepSpeed");
  CHECK(error_of(with(R"("optimizer": {"type": "OneBitLamb"}, "fp16": {"enabled": true})")) == "no error");
  CHECK(error_of(with(R"("optimizer": {"type": "OneBitAdam"}, "fp16": {"enabled": true, "loss_scale": 128})")) ==
        "no error");
  CHECK(error_of(with(R"("optimizer": {"type": "OneBitLamb"}, "bf16": {"enabled": true})")) == "no error");
}
