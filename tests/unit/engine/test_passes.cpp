// Passes other than a training step: activation checkpointing (recompute) changes memory, not
// results; evaluation and prediction are forward-only, leave training untouched, and agree across
// stages and world sizes.
#include <doctest/doctest.h>

#include <mutex>

#include "engine_test_util.h"

using namespace ds;
using namespace ds::test;

TEST_CASE("recompute: activation checkpointing gives bit-identical training at every stage") {
  for (int stage : {0, 1, 2, 3}) {
    for (amp::Storage p : {amp::Storage::F32, amp::Storage::BF16}) {
      CAPTURE(stage);
      RunSpec spec;
      spec.world = 2;
      spec.gas = 2;
      spec.stage = stage;
      spec.model = R"({"in_features": 12, "hidden": 24, "layers": 3, "classes": 5, "num_samples": 256})";
      spec.tweak = [p](EngineConfig& e) { e.precision = e.grad_storage = p; };
      const Run plain = run_training(spec);
      spec.tweak = [p](EngineConfig& e) {
        e.precision = e.grad_storage = p;
        e.recompute = true;
      };
      const Run recomputed = run_training(spec);
      CHECK(recomputed.params == plain.params);
      for (size_t s = 0; s < plain.steps.size(); ++s) CHECK(recomputed.steps[s].loss == plain.steps[s].loss);
    }
  }
}

TEST_CASE("evaluate and predict: forward only, the same on every stage and world size") {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", 4}, {"optimizer", nlohmann::json::parse(kAdam)}};
  std::vector<double> losses;
  std::mutex mutex;
  for (int world : {1, 2, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      DsConfig config = parse_config(cfg, "test", world);
      run_ranks(world, [&](ProcessGroup& group) {
        auto plugin = Plugin::load(plugin_path(), kModel);
        EngineConfig e;
        e.micro_batch = 4;
        e.zero_stage = stage;
        e.seed = 7;
        Engine engine = make_engine(e, *plugin, group, config);
        PluginSamples samples(*plugin);
        const double before = engine.evaluate(samples, 64);  // 64 samples across the ranks
        CHECK(engine.evaluate(samples, 64) == before);       // nothing changed
        const std::vector<float> params = engine.gather_parameters();
        std::vector<float> x(4 * 12);
        std::vector<int32_t> y(4);
        ds_tensor in{x.data(), DS_F32, {2, {4, 12}}, DS_DEVICE_CPU}, tg{y.data(), DS_I32, {1, {4}}, DS_DEVICE_CPU};
        const int64_t first[] = {0, 1, 2, 3};
        plugin->get_batch(first, 4, in, tg);
        const std::vector<float> logits = engine.predict(in);
        CHECK(logits.size() == 4 * 5);
        CHECK(engine.gather_parameters() == params);
        for (int s = 0; s < 10; ++s) engine.step();  // training still works after forward-only passes
        const double after = engine.evaluate(samples, 64);
        CHECK(after < before);
        std::lock_guard lock(mutex);
        if (group.rank() == 0) losses.push_back(before);
      });
    }
  }
  for (double loss : losses) CHECK(loss == doctest::Approx(losses[0]).epsilon(1e-6));
}
