// torch.optim.lr_scheduler's classes (which DeepSpeed builds by name) and DeepSpeed's LRRangeTest at chosen
// updates k, worked by hand at epoch e = k − 1 (torch) and t = k − 2 (LRRangeTest), over base lr 0.1; and the
// config's checks on their keys.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <string>

#include <nlohmann/json.hpp>

#include "config/ds_config.h"
#include "optim/lr_schedule.h"
#include "optim_test_util.h"

using ds::test::check_close;

namespace {

ds::DsConfig config(const std::string& scheduler) {
  return ds::parse_config(nlohmann::json::parse(R"({"train_batch_size": 1,
      "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "scheduler": )" + scheduler + "}"),
                          "ds_config.json", 1);
}

std::unique_ptr<ds::LrSchedule> schedule(const std::string& scheduler) {
  const ds::DsConfig c = config(scheduler);
  return ds::make_lr_schedule(c.scheduler, c.optimizer.lr);
}

std::string error_of(const std::string& scheduler) {
  try {
    config(scheduler);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("lr: StepLR, MultiStepLR and ExponentialLR multiply by gamma") {
  auto step = schedule(R"({"type": "StepLR", "params": {"step_size": 3, "gamma": 0.5}})");
  for (int64_t k : {1, 2, 3}) check_close(step->lr(k), 0.1);  // epochs 0-2
  for (int64_t k : {4, 5, 6}) check_close(step->lr(k), 0.05);
  check_close(step->lr(7), 0.025);
  auto multi = schedule(R"({"type": "MultiStepLR", "params": {"milestones": [5, 2, 5]}})");  // gamma 0.1
  check_close(multi->lr(2), 0.1);  // epoch 1
  check_close(multi->lr(3), 0.01);  // epoch 2: the first milestone
  check_close(multi->lr(5), 0.01);
  check_close(multi->lr(6), 1e-4);  // epoch 5, listed twice: γ²
  auto exponential = schedule(R"({"type": "ExponentialLR", "params": {"gamma": 0.9}})");
  check_close(exponential->lr(1), 0.1);
  check_close(exponential->lr(3), 0.081);
}

TEST_CASE("lr: ConstantLR, LinearLR and PolynomialLR over total_iters") {
  auto constant = schedule(R"({"type": "ConstantLR", "params": {"factor": 0.5, "total_iters": 4}})");
  check_close(constant->lr(1), 0.05);
  check_close(constant->lr(4), 0.05);  // epoch 3
  check_close(constant->lr(5), 0.1);
  check_close(schedule(R"({"type": "ConstantLR"})")->lr(1), 0.1 / 3);  // torch's defaults: 1/3 for 5 epochs
  auto linear = schedule(R"({"type": "LinearLR", "params": {"start_factor": 0.25, "total_iters": 4}})");
  check_close(linear->lr(1), 0.025);
  check_close(linear->lr(3), 0.0625);  // 0.25 + 0.75·2/4
  check_close(linear->lr(5), 0.1);
  check_close(linear->lr(50), 0.1);
  auto polynomial = schedule(R"({"type": "PolynomialLR", "params": {"total_iters": 4, "power": 2}})");
  check_close(polynomial->lr(1), 0.1);
  check_close(polynomial->lr(3), 0.025);  // (1 − 2/4)²
  CHECK(polynomial->lr(5) == 0.0);
  CHECK(polynomial->lr(9) == 0.0);
}

TEST_CASE("lr: CosineAnnealingLR and CosineAnnealingWarmRestarts") {
  auto cosine = schedule(R"({"type": "CosineAnnealingLR", "params": {"T_max": 4, "eta_min": 0.01}})");
  check_close(cosine->lr(1), 0.1);
  check_close(cosine->lr(3), 0.055);  // half-way
  check_close(cosine->lr(5), 0.01);   // T_max
  check_close(cosine->lr(7), 0.055);  // and up again, as torch's
  auto restarts = schedule(R"({"type": "CosineAnnealingWarmRestarts", "params": {"T_0": 2, "T_mult": 2,
                                                                                 "eta_min": 0.01}})");
  check_close(restarts->lr(1), 0.1);
  check_close(restarts->lr(2), 0.055);  // epoch 1 of a cycle of 2
  check_close(restarts->lr(3), 0.1);    // epoch 2: a restart, the next cycle 4 long
  check_close(restarts->lr(4), 0.01 + 0.09 * (1 + std::cos(std::numbers::pi / 4)) / 2);
  check_close(restarts->lr(7), 0.1);    // epoch 6 = 2 + 4: cycles of 8 from here
  check_close(restarts->lr(9), 0.01 + 0.09 * (1 + std::cos(std::numbers::pi * 2 / 8)) / 2);
  auto even = schedule(R"({"type": "CosineAnnealingWarmRestarts", "params": {"T_0": 3}})");
  check_close(even->lr(4), 0.1);  // epoch 3
  check_close(even->lr(1001), 0.1 * (1 + std::cos(std::numbers::pi / 3)) / 2);  // epoch 1000 = 333·3 + 1
}

TEST_CASE("lr: LRRangeTest grows from lr_range_test_min_lr, continuously or in stairs") {
  auto smooth = schedule(R"({"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.001,
                                                               "lr_range_test_step_size": 10}})");
  check_close(smooth->lr(1), 0.001);
  check_close(smooth->lr(6), 0.0015);  // t = 4: (4 + 1)/10
  check_close(smooth->lr(11), 0.002);
  auto stairs = schedule(R"({"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.001,
      "lr_range_test_step_size": 10, "lr_range_test_step_rate": 2, "lr_range_test_staircase": true}})");
  check_close(stairs->lr(10), 0.001);
  check_close(stairs->lr(11), 0.003);
}

TEST_CASE("lr: torch's schedulers' keys are checked as torch checks them") {
  CHECK(error_of(R"({"type": "StepLR"})") == "ds_config.json: scheduler.params.step_size: missing (required by StepLR)");
  CHECK(error_of(R"({"type": "ConstantLR", "params": {"factor": 2}})") ==
        "ds_config.json: scheduler.params.factor: 2 must lie in [0, 1] (as torch)");
  CHECK(error_of(R"({"type": "LinearLR", "params": {"start_factor": 0}})") ==
        "ds_config.json: scheduler.params.start_factor: 0 must lie in (0, 1] (as torch)");
  CHECK(error_of(R"({"type": "MultiStepLR", "params": {"milestones": 3}})") ==
        "ds_config.json: scheduler.params.milestones: 3 is not a list of integers");
  CHECK(error_of(R"({"type": "CosineAnnealingWarmRestarts", "params": {"T_0": 2, "T_mult": 0}})") ==
        "ds_config.json: scheduler.params.T_mult: 0 must be >= 1");
  CHECK(error_of(R"({"type": "ExponentialLR", "params": {"gamma": 0.9, "last_epoch": 4}})") ==
        "ds_config.json: scheduler.params.last_epoch: 4 is not supported (only -1, a fresh start; dsworker resumes "
        "schedules from checkpoints)");
  CHECK(error_of(R"({"type": "StepLR", "params": {"step_size": 2, "gama": 0.5}})") ==
        "ds_config.json: scheduler.params.gama: unknown key (did you mean 'gamma'?)");
  CHECK(error_of(R"({"type": "LambdaLR"})") ==
        "ds_config.json: scheduler.type: \"LambdaLR\" is not supported by dsworker (supported: WarmupLR, "
        "WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest, StepLR, MultiStepLR, ConstantLR, LinearLR, "
        "ExponentialLR, PolynomialLR, CosineAnnealingLR, CosineAnnealingWarmRestarts)");
  CHECK(error_of(R"({"type": "ExponentialLR", "params": {"gamma": 0.9, "verbose": true}})").empty());
  const auto resolved = ds::resolved_json(config(R"({"type": "MultiStepLR", "params": {"milestones": [9, 3]}})"));
  CHECK(resolved["scheduler"] == nlohmann::ordered_json::parse(R"({"type": "MultiStepLR",
                                                                    "params": {"milestones": [3, 9], "gamma": 0.1}})"));
}
