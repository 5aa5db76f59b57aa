// Data parallelism changes nothing but speed: N ranks (threads with real Gloo over loopback) with
// global batch B end with the same parameters as one rank with batch B, with and without gradient
// accumulation and clipping; and the same run twice is bit-identical.
#include <doctest/doctest.h>

#include <map>
#include <tuple>

#include "engine_test_util.h"

using namespace ds;
using namespace ds::test;

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
    auto plugin = Plugin::load(plugin_path(), kModel);
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
    auto plugin = Plugin::load(plugin_path(),
                               R"({"num_samples": 64, "inject_nonfinite_grad_steps": [3]})");
    EngineConfig e;
    e.micro_batch = 8;
    Engine engine = make_engine(e, *plugin, group, config);
    engine.step();
    engine.step();
    CHECK_THROWS_WITH(engine.step(), doctest::Contains("step 3: the gradient norm is inf; fp32 training has no loss scaling"));
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

// Stages 1-3 end 20 steps with stage 0's bits on one rank and on two with one micro-batch per step (each sum then
// has two addends: one order).
void check_stages_bitwise(const std::string& optimizer) {
  for (int world : {1, 2}) {
    CAPTURE(world);
    const std::vector<float> stage0 = train(world, 4, 1, 0.0, optimizer, 20, 0);
    for (int stage : {1, 2, 3}) {
      CAPTURE(stage);
      CHECK(train(world, 4, 1, 0.0, optimizer, 20, stage) == stage0);
    }
  }
}

// Lion moves each parameter by ±lr: a sum in another order that flips a sign near 0 moves it by 2·lr, so it is
// held to bits where the sums cannot differ (with several micro-batches stages 2-3 add them in another order).
TEST_CASE("engine: Lion lowers the loss and ends every ZeRO stage with the parameters of stage 0") {
  check_stages_bitwise(kLion);
  RunSpec spec;
  spec.optimizer = kLion;
  spec.micro = 16;
  spec.steps = 100;
  const Run run = run_training(spec);
  CHECK(run.steps.back().loss < 0.5 * run.steps.front().loss);
}

// Muon at every stage: on a partition each rank orthogonalizes the matrices it holds a part of from every rank's
// update, gathered, and steps its part: stage 0's bits where the sums cannot differ, as Lion's above.
TEST_CASE("engine: Muon lowers the loss and ends every ZeRO stage with the parameters of stage 0") {
  check_stages_bitwise(kMuon);
  RunSpec spec;  // (the specs' WarmupLR runs the Muon group at 0.01, the Adam group at a quarter of it)
  spec.optimizer = kMuon;
  spec.micro = 16;
  spec.steps = 300;
  const Run run = run_training(spec);
  CHECK(run.steps.back().loss < 0.5 * run.steps.front().loss);
}

// Adagrad at every stage: stage 0's bits where the sums cannot differ, as Lion's above.
TEST_CASE("engine: Adagrad ends every ZeRO stage with the parameters of stage 0") {
  check_stages_bitwise(kAdagrad);
}

// RMSprop likewise, plain and with its three state buffers (momentum, centered).
TEST_CASE("engine: RMSprop ends every ZeRO stage with the parameters of stage 0") {
  check_stages_bitwise(kRmsprop);
  check_stages_bitwise(kRmspropFull);
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

// Per rank with Adam, W ranks, p bytes of parameter, g of gradient and K of optimizer state per
// element (fp32: 4 + 4 + 8; fp16 mixed precision: 2 + 2 + 12, the fp32 master copy counted in K as in
// the ZeRO paper): stage 0 (p+g+K)Ψ, stage 1 (p+g)Ψ + KΨ/W, stage 2 pΨ + (g+K)Ψ/W, stage 3
// (p+g+K)Ψ/W bytes of model states, i.e. 16Ψ, 4Ψ + 12Ψ/W, 2Ψ + 14Ψ/W, 16Ψ/W in fp16. Per step (one
// micro-batch) stages 0-2 send 2Ψ(W−1)/W elements, stage 3 3Ψ(W−1)/W, of p bytes each. On a 128-layer
// MLP of 2.1M parameters, with buckets and prefetch of one layer, so that the transient copies
// counted in (a gradient bucket, the layer running and the one prefetched) stay small beside the
// model states: 3 · 16.5k · 4 bytes against 16Ψ/W = 8.4 MB at W = 4 (2.4%).
TEST_CASE("engine: model-state memory and communication per rank match the ZeRO formulas") {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", 4},
                        {"optimizer", {{"type", "Adam"}, {"params", {{"lr", 0.01}}}}}};
  for (amp::Storage precision : {amp::Storage::F32, amp::Storage::F16}) {
    const double p = static_cast<double>(amp::storage_bytes(precision)), g = p, k = p == 4 ? 8 : 12;
    for (int world : {2, 4}) {
      DsConfig config = parse_config(cfg, "test", world);
      for (int stage : {0, 1, 2, 3}) {
        run_ranks(world, [&](ProcessGroup& group) {
          auto plugin = Plugin::load(plugin_path(), R"({"in_features": 64, "hidden": 128, "layers": 128, "classes": 10,
                                                        "num_samples": 256})");
          EngineConfig e;
          e.micro_batch = 4;
          e.zero_stage = stage;
          e.precision = e.grad_storage = precision;
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
          const double states[] = {(p + g + k) * psi, (p + g) * psi + k * psi / w, p * psi + (g + k) * psi / w,
                                   (p + g + k) * psi / w};
          const double moved[] = {2, 2, 2, 3};
          const double memory = static_cast<double>(engine.memory().model_states());
          const double elements = static_cast<double>(sent() - before) / p;
          const double theory = moved[stage] * psi * (w - 1) / w;
          CAPTURE(p);
          CAPTURE(world);
          CAPTURE(stage);
          CAPTURE(memory / states[stage]);
          CAPTURE(elements / theory);
          CHECK(std::abs(memory - states[stage]) / states[stage] < 0.05);
          CHECK(std::abs(elements - theory) / theory < 0.02);
          if (stage >= 1) CHECK(engine.memory().optimizer_state == doctest::Approx(k * psi / w).epsilon(0.01));
        });
      }
    }
  }
}
