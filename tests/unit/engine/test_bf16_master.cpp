// bf16 master weights and gradients (bf16.bf16_master_weights_and_grads) and bf16 optimizer states
// at ZeRO stages 1-3: training tracks the fp32 run, the parameters are the bf16 values the optimizer
// wrote, no fp32 copies are held, and a checkpoint resumes the run exactly.
#include <doctest/doctest.h>

#include <cmath>

#include "amp/storage.h"
#include "cpu/convert.h"
#include "engine_test_util.h"

using namespace ds;
using namespace ds::test;

namespace {

std::function<void(EngineConfig&)> bf16_master(bool master = true) {
  return [master](EngineConfig& e) {
    e.precision = e.grad_storage = amp::Storage::BF16;
    e.low_precision_master = master;
  };
}

// Runs `body` with an engine on each of `world` thread ranks: the mlp, AdamW, bf16 at `stage`,
// with bf16 master weights (or fp32 ones) and optimizer states of `states`.
void with_engines(int world, int stage, bool master, amp::Storage states, const std::function<void(Engine&)>& body) {
  const DsConfig config = parse_config({{"train_micro_batch_size_per_gpu", 8}, {"optimizer", nlohmann::json::parse(kAdam)}},
                                       "test", world);
  run_ranks(world, [&](ProcessGroup& group) {
    auto plugin = Plugin::load(plugin_path(), kModel);
    EngineConfig e;
    e.micro_batch = 8;
    e.zero_stage = stage;
    e.reduce_bucket_elems = 100;
    e.seed = 7;
    bf16_master(master)(e);
    Engine engine(e, *plugin, group,
                  [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r, &group, states); },
                  make_lr_schedule(config.scheduler, config.optimizer.lr));
    body(engine);
  });
}

}  // namespace

// 20 AdamW steps (clipping at 1) against the fp32 run, with the bounds of test_mixed_precision.cpp's
// bf16 runs (u = 2^-8): each step's loss within u relative (measured: 0.25u-0.37u), the parameters
// within 10% of the distance training moved them (measured 1.8-2.5%). The 16-bit master rounds
// every update, but AdamW's steps of about lr = 0.01 are several bf16 ulps of these weights.
TEST_CASE("bf16 master weights: stages 1-3 on 1-3 ranks track the fp32 run") {
  for (auto [world, gas] : {std::pair{1, 1}, {2, 1}, {3, 1}, {2, 2}}) {
    RunSpec spec;
    spec.world = world;
    spec.gas = gas;
    spec.micro = 8 / gas;
    spec.clip = 1.0;
    const Run fp32 = run_training(spec);
    for (int stage : {1, 2, 3}) {
      CAPTURE(stage);
      CAPTURE(world);
      CAPTURE(gas);
      spec.stage = stage;
      spec.every_step = true;  // and every rank holds the same parameters after every step
      spec.tweak = bf16_master();
      const Run run = run_training(spec);
      for (size_t s = 0; s < run.steps.size(); ++s) {
        CAPTURE(s);
        CHECK(std::abs(run.steps[s].loss - fp32.steps[s].loss) <= 0x1p-8 * fp32.steps[s].loss);
      }
      CHECK(distance(run.params, fp32.params) < 0.1 * distance(fp32.params, fp32.initial));
      std::vector<float> rounded = run.params;  // the master copy is the bf16 parameters themselves
      cpu::round_to(amp::Storage::BF16, rounded.data(), rounded.size());
      CHECK(rounded == run.params);
    }
  }
}

// Per element of this rank's partition P, standard bf16 holds an fp32 master (4 bytes, counted as
// optimizer state); the bf16 master does not, and bf16 optimizer states halve Adam's 8 bytes. Neither
// holds an fp32 copy of the gradients: Adam reads the bf16 gradients themselves (fused update).
TEST_CASE("bf16 master weights: no fp32 copies, and bf16 optimizer states halve the moments") {
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    std::vector<MemoryReport> reports(3);
    size_t partition = 0;
    for (int kind = 0; kind < 3; ++kind)
      with_engines(2, stage, kind > 0, kind == 2 ? amp::Storage::BF16 : amp::Storage::F32, [&](Engine& engine) {
        engine.step();
        if (engine.layout().rank() != 0) return;
        reports[kind] = engine.memory();
        partition = engine.layout().partition_size();
      });
    CHECK(partition > 0);
    CHECK(reports[0].optimizer_state == 12 * partition);
    CHECK(reports[1].optimizer_state == 8 * partition);
    CHECK(reports[0].workspace == reports[1].workspace);
    CHECK(reports[2].optimizer_state == 4 * partition);
    CHECK(reports[1].params == reports[0].params);
    CHECK(reports[1].grads == reports[0].grads);
  }
}

// A checkpoint holds the bf16 master values and moments widened to fp32; restoring it and going on
// gives the run that never stopped, bit for bit.
TEST_CASE("bf16 master weights: a checkpoint resumes the run exactly") {
  for (amp::Storage states : {amp::Storage::F32, amp::Storage::BF16}) {
    for (int stage : {1, 3}) {
      CAPTURE(stage);
      CAPTURE(states == amp::Storage::BF16);
      std::vector<float> straight, resumed;
      TrainingState saved;
      with_engines(1, stage, true, states, [&](Engine& engine) {
        for (int s = 0; s < 6; ++s) engine.step();
        straight = engine.gather_parameters();
      });
      with_engines(1, stage, true, states, [&](Engine& engine) {
        for (int s = 0; s < 3; ++s) engine.step();
        saved = engine.checkpoint_shard();
      });
      with_engines(1, stage, true, states, [&](Engine& engine) {
        engine.restore(saved);
        for (int s = 0; s < 3; ++s) engine.step();
        resumed = engine.gather_parameters();
      });
      CHECK(resumed == straight);
    }
  }
}

