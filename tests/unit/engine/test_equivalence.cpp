// Data parallelism changes nothing but speed: N ranks (threads with real Gloo over loopback) with
// global batch B end with the same parameters as one rank with batch B, with and without gradient
// accumulation and clipping; and the same run twice is bit-identical.
#include <doctest/doctest.h>

#include <cmath>
#include <mutex>

#include <nlohmann/json.hpp>

#include "comm/process_group.h"
#include "comm/thread_ranks.h"
#include "config/ds_config.h"
#include "engine/engine.h"

using namespace ds;

namespace {

const char* kModel = R"({"in_features": 12, "hidden": 24, "classes": 5, "num_samples": 256})";

// Parameters after `steps` optimizer steps on `world` ranks (rank 0's copy; all ranks are checked equal).
std::vector<float> train(int world, int micro, int gas, double clip, const std::string& optimizer, int steps,
                         int stage = 0) {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", micro},
                        {"gradient_accumulation_steps", gas},
                        {"gradient_clipping", clip},
                        {"optimizer", nlohmann::json::parse(optimizer)},
                        {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 0.01}, {"warmup_num_steps", 5}}}}}};
  DsConfig config = parse_config(cfg, "test", world);
  std::vector<std::vector<float>> finals(world);
  std::mutex mutex;
  run_ranks(world, [&](ProcessGroup& group) {
    auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so", kModel);
    EngineConfig e;
    e.micro_batch = config.train_micro_batch_size_per_gpu;
    e.grad_accum = config.gradient_accumulation_steps;
    e.gradient_clipping = config.gradient_clipping;
    e.reduce_bucket_elems = 100;  // several buckets, launched during backward
    e.seed = 7;
    e.zero_stage = stage;
    Engine engine(e, *plugin, group, [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r); },
                  make_lr_schedule(config.scheduler, config.optimizer.lr));
    for (int s = 0; s < steps; ++s) engine.step();
    std::lock_guard lock(mutex);
    finals[group.rank()].assign(engine.parameters().begin(), engine.parameters().end());
  });
  for (int r = 1; r < world; ++r) REQUIRE(finals[r] == finals[0]);  // replicas never drift apart
  return finals[0];
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

const std::string kAdam = R"({"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}})";
const std::string kSgd = R"({"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}})";
const std::string kLamb = R"({"type": "Lamb", "params": {"lr": 0.01, "weight_decay": 0.01}})";

}  // namespace

TEST_CASE("engine: N ranks with global batch B match one rank with batch B") {
  const int batch = 16, steps = 20;
  for (const std::string& optimizer : {kAdam, kSgd}) {
    for (double clip : {0.0, 0.05}) {
      const std::vector<float> single = train(1, batch, 1, clip, optimizer, steps);
      for (int world : {2, 4}) {
        for (int gas : {1, 2}) {
          CAPTURE(optimizer);
          CAPTURE(clip);
          CAPTURE(world);
          CAPTURE(gas);
          const auto multi = train(world, batch / world / gas, gas, clip, optimizer, steps);
          CHECK(relative_difference(multi, single) < 1e-6);
        }
      }
      CHECK(relative_difference(train(3, 16 / 4, 4, clip, optimizer, steps), train(1, 48, 1, clip, optimizer, steps)) <
            1e-6);
    }
  }
}

TEST_CASE("engine: the same run twice is bit-identical") {
  CHECK(train(2, 4, 2, 0.05, kAdam, 10) == train(2, 4, 2, 0.05, kAdam, 10));
}

TEST_CASE("engine: training lowers the loss") {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", 16},
                        {"optimizer", {{"type", "Adam"}, {"params", {{"lr", 0.01}}}}}};
  DsConfig config = parse_config(cfg, "test", 1);
  run_ranks(1, [&](ProcessGroup& group) {
    auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so", kModel);
    EngineConfig e;
    e.micro_batch = 16;
    Engine engine(e, *plugin, group, [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r); },
                  make_lr_schedule(config.scheduler, config.optimizer.lr));
    const double first = engine.step().loss;
    double last = first;
    for (int s = 0; s < 100; ++s) last = engine.step().loss;
    CHECK(last < 0.5 * first);
    const MemoryReport m = engine.memory();
    CHECK(m.params == engine.num_parameters() * 4);
    CHECK(m.grads == m.params);
    CHECK(m.optimizer_state == 2 * m.params);  // Adam: exp_avg and exp_avg_sq
  });
}

TEST_CASE("engine: a non-finite gradient stops training with the step number") {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", 8},
                        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.01}}}}}};
  DsConfig config = parse_config(cfg, "test", 1);
  run_ranks(1, [&](ProcessGroup& group) {
    auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so",
                               R"({"num_samples": 64, "inject_nonfinite_grad_steps": [3]})");
    EngineConfig e;
    e.micro_batch = 8;
    Engine engine(e, *plugin, group, [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r); },
                  make_lr_schedule(config.scheduler, config.optimizer.lr));
    engine.step();
    engine.step();
    CHECK_THROWS_WITH(engine.step(), doctest::Contains("step 3: the gradient norm is inf"));
  });
}

TEST_CASE("engine: ZeRO stage 1 ends with the parameters of stage 0") {
  // 24*12+24 + 5*24+5 = 437 parameters: no world size here divides them, so partitions are padded.
  for (const std::string& optimizer : {kAdam, kSgd, kLamb}) {
    for (double clip : {0.0, 0.05}) {
      for (int world : {1, 2, 3, 4}) {
        for (int gas : {1, 2}) {
          CAPTURE(optimizer);
          CAPTURE(clip);
          CAPTURE(world);
          CAPTURE(gas);
          const auto stage0 = train(world, 4, gas, clip, optimizer, 20, 0);
          const auto stage1 = train(world, 4, gas, clip, optimizer, 20, 1);
          if (world == 1)
            CHECK(stage1 == stage0);  // nothing to partition: bit-identical
          else
            CHECK(relative_difference(stage1, stage0) < 1e-6);
        }
      }
    }
  }
}

TEST_CASE("engine: stage 1 keeps optimizer state for its partition and moves 2 psi (W-1)/W per step") {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", 8},
                        {"optimizer", {{"type", "Adam"}, {"params", {{"lr", 0.01}}}}}};
  const int world = 4;
  DsConfig config = parse_config(cfg, "test", world);
  for (int stage : {0, 1}) {
    run_ranks(world, [&](ProcessGroup& group) {
      auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so",
                                 R"({"in_features": 64, "hidden": 256, "classes": 10, "num_samples": 256})");
      EngineConfig e;
      e.micro_batch = 8;
      e.zero_stage = stage;
      Engine engine(e, *plugin, group, [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r); },
                    make_lr_schedule(config.scheduler, config.optimizer.lr));
      const double psi = static_cast<double>(engine.num_parameters());
      const MemoryReport m = engine.memory();
      const double adam_state = stage == 0 ? 8 * psi : 8 * psi / world;
      CHECK(std::abs(m.optimizer_state - adam_state) / adam_state < 0.01);
      engine.step();  // warm-up: the constructor's broadcast is not a training step
      const CommsLogger& comms = group.comms();
      auto sent = [&] {
        uint64_t total = 0;
        for (const char* op : {"allreduce", "reduce_scatter", "allgather"}) total += comms.stats(op).sent_bytes;
        return total;
      };
      const uint64_t before = sent();
      engine.step();
      const double elements = static_cast<double>(sent() - before) / 4.0;
      const double theory = 2.0 * psi * (world - 1) / world;
      CHECK(elements >= theory);                  // the step's few scalars (loss, norm) add a little
      CHECK((elements - theory) / theory < 0.02);
    });
  }
}
