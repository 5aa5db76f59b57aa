// Data parallelism changes nothing but speed: N ranks (threads with real Gloo over loopback) with
// global batch B end with the same parameters as one rank with batch B, with and without gradient
// accumulation and clipping; and the same run twice is bit-identical.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <tuple>
#include <mutex>

#include <nlohmann/json.hpp>

#include "comm/process_group.h"
#include "comm/thread_ranks.h"
#include "config/ds_config.h"
#include "engine/engine.h"

using namespace ds;

namespace {

const char* kModel = R"({"in_features": 12, "hidden": 24, "classes": 5, "num_samples": 256})";

// An engine with the config's optimizer and LR schedule.
Engine make_engine(const EngineConfig& e, Plugin& plugin, ProcessGroup& group, const DsConfig& config) {
  return Engine(e, plugin, group, [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r); },
                make_lr_schedule(config.scheduler, config.optimizer.lr));
}

// Parameters after `steps` optimizer steps on `world` ranks (rank 0's copy; all ranks are checked equal).
std::vector<float> train(int world, int micro, int gas, double clip, const std::string& optimizer, int steps,
                         int stage = 0, const std::function<void(EngineConfig&)>& tweak = {}) {
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
    if (tweak) tweak(e);
    Engine engine = make_engine(e, *plugin, group, config);
    for (int s = 0; s < steps; ++s) engine.step();
    std::vector<float> params = engine.gather_parameters();  // a collective at stage 3: outside the lock
    std::lock_guard lock(mutex);
    finals[group.rank()] = std::move(params);
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
    Engine engine = make_engine(e, *plugin, group, config);
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
    Engine engine = make_engine(e, *plugin, group, config);
    engine.step();
    engine.step();
    CHECK_THROWS_WITH(engine.step(), doctest::Contains("step 3: the gradient norm is inf"));
  });
}

// Every stage ends 20 steps with the parameters of stage 0: within 1e-6 relative (the sums run in
// another order), bit-identical on one rank. 24*12+24 + 5*24+5 = 437 parameters: no world size here
// divides them, so partitions are padded.
void check_stage_matches_stage0(int stage, const std::function<void(EngineConfig&)>& tweak = {}) {
  static std::map<std::tuple<std::string, double, int, int>, std::vector<float>> stage0_runs;
  for (const std::string& optimizer : {kAdam, kSgd, kLamb}) {
    for (double clip : {0.0, 0.05}) {
      for (int world : {1, 2, 3, 4}) {
        for (int gas : {1, 2}) {
          CAPTURE(optimizer);
          CAPTURE(clip);
          CAPTURE(world);
          CAPTURE(gas);
          auto [at, fresh] = stage0_runs.try_emplace({optimizer, clip, world, gas});
          if (fresh) at->second = train(world, 4, gas, clip, optimizer, 20, 0);
          const std::vector<float>& stage0 = at->second;
          const auto staged = train(world, 4, gas, clip, optimizer, 20, stage, tweak);
          if (world == 1)
            CHECK(staged == stage0);  // nothing to partition: bit-identical
          else
            CHECK(relative_difference(staged, stage0) < 1e-6);
        }
      }
    }
  }
}

TEST_CASE("engine: ZeRO stage 1 ends with the parameters of stage 0") { check_stage_matches_stage0(1); }

TEST_CASE("engine: ZeRO stage 2 ends with the parameters of stage 0") {
  check_stage_matches_stage0(2);
  check_stage_matches_stage0(2, [](EngineConfig& e) { e.overlap_comm = true; });
}

TEST_CASE("engine: ZeRO stage 3 ends with the parameters of stage 0") {
  // Defaults: both MLP layers prefetched, the loss layer (no parameters) persistent.
  check_stage_matches_stage0(3, [](EngineConfig& e) { e.overlap_comm = true; });
}

TEST_CASE("engine: ZeRO stage 3 with no prefetch, a tight live cap, or persistent layers") {
  // No prefetch and a cap below one layer: every layer gathered on demand, one at a time.
  check_stage_matches_stage0(3, [](EngineConfig& e) {
    e.stage3.prefetch_elems = 0;
    e.stage3.max_live_elems = 1;
  });
  // The small output layer (125 elements) persistent, the hidden one (312) not.
  check_stage_matches_stage0(3, [](EngineConfig& e) { e.stage3.persistence = 200; });
}

// Per rank, fp32 with Adam (4 bytes of parameter, 4 of gradient, 8 of optimizer state per element),
// W ranks: stage 0 16Ψ, stage 1 8Ψ + 8Ψ/W, stage 2 4Ψ + 12Ψ/W, stage 3 16Ψ/W bytes of model states;
// per step (one micro-batch) stages 0-2 send 2Ψ(W−1)/W elements, stage 3 3Ψ(W−1)/W. On a 128-layer
// MLP of 2.1M parameters, with buckets and prefetch of one layer, so that the transient copies
// counted in (a gradient bucket, the layer running and the one prefetched) stay small beside the
// model states: 3 · 16.5k · 4 bytes against 16Ψ/W = 8.4 MB at W = 4 (2.4%).
TEST_CASE("engine: model-state memory and communication per rank match the ZeRO formulas") {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", 4},
                        {"optimizer", {{"type", "Adam"}, {"params", {{"lr", 0.01}}}}}};
  for (int world : {2, 4}) {
    DsConfig config = parse_config(cfg, "test", world);
    for (int stage : {0, 1, 2, 3}) {
      run_ranks(world, [&](ProcessGroup& group) {
        auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so",
                                   R"({"in_features": 64, "hidden": 128, "layers": 128, "classes": 10,
                                       "num_samples": 256})");
        EngineConfig e;
        e.micro_batch = 4;
        e.zero_stage = stage;
        e.reduce_bucket_elems = 20000;  // one hidden layer (16512) per bucket
        e.stage3.prefetch_elems = 20000;
        e.stage3.persistence = 0;
        Engine engine = make_engine(e, *plugin, group, config);
        engine.step();  // warm-up: the pools fill, and the constructor's collectives are not a step
        const CommsLogger& comms = group.comms();
        auto sent = [&] {
          uint64_t total = 0;
          for (const char* op : {"allreduce", "reduce_scatter", "allgather"}) total += comms.stats(op).sent_bytes;
          return total;
        };
        const uint64_t before = sent();
        engine.step();
        const double psi = static_cast<double>(engine.num_parameters()), w = world;
        const double states[] = {16 * psi, 8 * psi + 8 * psi / w, 4 * psi + 12 * psi / w, 16 * psi / w};
        const double moved[] = {2, 2, 2, 3};
        const double memory = static_cast<double>(engine.memory().model_states());
        const double elements = static_cast<double>(sent() - before) / 4.0;
        const double theory = moved[stage] * psi * (w - 1) / w;
        CAPTURE(world);
        CAPTURE(stage);
        CAPTURE(memory / states[stage]);
        CAPTURE(elements / theory);
        CHECK(std::abs(memory - states[stage]) / states[stage] < 0.05);
        CHECK(std::abs(elements - theory) / theory < 0.02);
        if (stage >= 1) CHECK(engine.memory().optimizer_state == doctest::Approx(8 * psi / w).epsilon(0.01));
      });
    }
  }
}
