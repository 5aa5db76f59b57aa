// ZeRO-Infinity's parameter offload (stage 3): the parameter partition in a swap file, read in ahead
// of each gather and written back after each update, gives the in-memory run bit for bit at every
// precision, world size, buffer count, prefetch setting and micro-batch count, with or without the
// optimizer state on NVMe too; memory holds the kept layers and the buffers; evaluation, prediction
// and checkpoints work as in memory; bad settings are clear errors.
#include <doctest/doctest.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "engine_test_util.h"

using namespace ds;
using namespace ds::test;

namespace {

std::string swap_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

offload::ParamSwapConfig params_on_nvme(size_t buffers, size_t max_in_cpu = 0) {
  offload::ParamSwapConfig c;
  c.dir = swap_dir();
  c.buffer_count = buffers;
  c.max_in_cpu = max_in_cpu;
  c.aio.block_size = 4096;
  return c;
}

offload::SwapConfig optimizer_on_nvme() {
  offload::SwapConfig c;
  c.dir = swap_dir();
  c.sub_group = 100;
  c.buffer_count = 3;
  return c;
}

// Stage 3 without persistent layers, so that every layer with parameters is swapped.
std::function<void(EngineConfig&)> setup(amp::Storage precision, std::optional<offload::ParamSwapConfig> params,
                                         bool optimizer_nvme, int64_t prefetch) {
  return [=](EngineConfig& e) {
    e.precision = e.grad_storage = precision;
    if (precision == amp::Storage::F16) e.loss_scaling = amp::LossScalerConfig{};
    e.stage3.persistence = 0;
    e.stage3.prefetch_elems = prefetch;
    e.param_offload = params;
    if (optimizer_nvme) e.nvme_offload = optimizer_on_nvme();
  };
}

const DsConfig& adam_config() {
  static const DsConfig config = parse_config(
      {{"train_micro_batch_size_per_gpu", 4}, {"optimizer", nlohmann::json::parse(kAdam)}}, "test", 1);
  return config;
}

// One engine per rank on `world` thread ranks, stage 3, with the given tweak.
void with_engines(int world, const std::function<void(EngineConfig&)>& tweak,
                  const std::function<void(Engine&, Plugin&, ProcessGroup&)>& body) {
  run_ranks(world, [&](ProcessGroup& group) {
    auto plugin = Plugin::load(plugin_path(), kModel);
    EngineConfig e;
    e.micro_batch = 4;
    e.zero_stage = 3;
    e.seed = 7;
    tweak(e);
    Engine engine = make_engine(e, *plugin, group, adam_config());
    body(engine, *plugin, group);
  });
}

}  // namespace

TEST_CASE("parameter offload: every precision, world size, buffer count and prefetch gives the in-memory run bit for bit") {
  struct Case {
    amp::Storage precision;
    const char* name;
  };
  for (Case c : {Case{amp::Storage::F32, "fp32"}, Case{amp::Storage::BF16, "bf16"}, Case{amp::Storage::F16, "fp16"}}) {
    for (int world : {1, 2}) {
      for (int gas : {1, 2}) {
        CAPTURE(c.name);
        CAPTURE(world);
        CAPTURE(gas);
        RunSpec spec;
        spec.world = world;
        spec.stage = 3;
        spec.gas = gas;
        spec.steps = 6;
        spec.clip = 1.0;
        spec.tweak = setup(c.precision, std::nullopt, false, 50'000'000);
        const Run memory = run_training(spec);
        for (size_t buffers : {1, 2, 4}) {
          for (bool optimizer_nvme : {false, true}) {
            CAPTURE(buffers);
            CAPTURE(optimizer_nvme);
            const int64_t prefetch = buffers == 2 ? 0 : 50'000'000;  // no prefetch: reads still run ahead
            spec.tweak = setup(c.precision, params_on_nvme(buffers), optimizer_nvme, prefetch);
            const Run swapped = run_training(spec);
            for (size_t s = 0; s < memory.steps.size(); ++s) CHECK(swapped.steps[s].loss == memory.steps[s].loss);
            CHECK(swapped.params == memory.params);
          }
        }
      }
    }
  }
}

TEST_CASE("parameter offload: memory holds the buffers, the swap file the chunks, and each gather reads its chunk once") {
  // The mlp's layers with parameters are 0 (12x24 + 24 = 312) and 2 (24x5 + 5 = 125): chunks of 156
  // and 63 elements at 2 ranks, one 4 KiB region each in the file.
  MemoryReport in_memory, swapped;
  with_engines(2, setup(amp::Storage::F32, std::nullopt, false, 50'000'000), [&](Engine& engine, Plugin&, ProcessGroup& g) {
    engine.step();
    if (g.rank() == 0) in_memory = engine.memory();
  });
  with_engines(2, setup(amp::Storage::F32, params_on_nvme(2), false, 50'000'000), [&](Engine& engine, Plugin&, ProcessGroup& g) {
    engine.step();
    const auto stats = engine.param_swap_stats();
    REQUIRE(stats.has_value());
    CHECK(stats->bytes_written == 2 * 2 * 4096);  // the initial chunks, and the update
    // A step gathers 0, 2 (forward), 2 again after the loss layer, 0: four reads; then the next
    // step's first two, read ahead into the two buffers.
    CHECK(stats->bytes_read == (4 + 2) * 4096);
    if (g.rank() == 0) swapped = engine.memory();
  });
  CHECK(in_memory.nvme_params == 0);
  CHECK(swapped.nvme_params == 2 * 4096);
  CHECK(swapped.params - 2 * 4096 == in_memory.params - (156 + 63) * 4);  // two buffers instead of the partition
  CHECK(swapped.optimizer_state == in_memory.optimizer_state + (156 + 63) * 4);  // the fp32 master apart
  // max_in_cpu keeps layer 0's chunk in memory: only layer 2 is on NVMe.
  with_engines(2, setup(amp::Storage::BF16, params_on_nvme(2, 156), false, 50'000'000),
               [](Engine& engine, Plugin&, ProcessGroup&) {
                 engine.step();
                 CHECK(engine.memory().nvme_params == 4096);
               });
}

TEST_CASE("parameter offload: evaluation and prediction read the swapped chunks, and training goes on") {
  std::vector<double> evaluations[2];
  std::vector<std::vector<float>> predictions[2];
  std::mutex mutex;
  for (int swapped : {0, 1}) {
    with_engines(2, setup(amp::Storage::BF16, swapped ? std::optional(params_on_nvme(2)) : std::nullopt, false, 50'000'000),
                 [&](Engine& engine, Plugin& plugin, ProcessGroup& group) {
                   PluginSamples samples(plugin);
                   std::vector<float> x(4 * 12);
                   std::vector<int32_t> y(4);
                   ds_tensor in{x.data(), DS_F32, {2, {4, 12}}, DS_DEVICE_CPU}, tg{y.data(), DS_I32, {1, {4}}, DS_DEVICE_CPU};
                   const int64_t first[] = {0, 1, 2, 3};
                   plugin.get_batch(first, 4, in, tg);
                   std::vector<double> losses;
                   std::vector<std::vector<float>> logits;
                   for (int round = 0; round < 3; ++round) {
                     losses.push_back(engine.evaluate(samples, 64));
                     logits.push_back(engine.predict(in));
                     for (int s = 0; s < 3; ++s) engine.step();
                   }
                   std::lock_guard lock(mutex);
                   if (group.rank() != 0) return;
                   evaluations[swapped] = losses;
                   predictions[swapped] = logits;
                 });
  }
  CHECK(evaluations[1] == evaluations[0]);
  CHECK(predictions[1] == predictions[0]);
  CHECK(evaluations[0].back() < evaluations[0].front());
}

TEST_CASE("parameter offload: checkpoints move between the swap file and memory") {
  auto tweak = [](bool swapped) {
    return setup(amp::Storage::BF16, swapped ? std::optional(params_on_nvme(3)) : std::nullopt, swapped, 50'000'000);
  };
  check_checkpoints_cross([&](bool swapped, const std::function<void(Engine&)>& body) {
    with_engines(1, tweak(swapped), [&](Engine& engine, Plugin&, ProcessGroup&) { body(engine); });
  });
}

TEST_CASE("parameter offload: clear errors for a stage below 3, bf16 master weights, small buffers and a missing directory") {
  RunSpec spec;
  spec.steps = 1;
  spec.stage = 2;
  spec.tweak = setup(amp::Storage::F32, params_on_nvme(2), false, 0);
  CHECK_THROWS_WITH_AS(run_training(spec), doctest::Contains("NVMe offload of the parameters needs ZeRO stage 3"),
                       std::exception);
  spec.stage = 3;
  spec.tweak = [](EngineConfig& e) {
    setup(amp::Storage::BF16, params_on_nvme(2), false, 0)(e);
    e.low_precision_master = true;
  };
  CHECK_THROWS_WITH_AS(run_training(spec), doctest::Contains("bf16.bf16_master_weights_and_grads"), std::exception);
  spec.tweak = [](EngineConfig& e) {
    offload::ParamSwapConfig c = params_on_nvme(2);
    c.buffer_size = 100;
    setup(amp::Storage::F32, c, false, 0)(e);
  };
  CHECK_THROWS_WITH_AS(run_training(spec),
                       doctest::Contains("offload_param.buffer_size: 100 elements is less than layer 'fc1''s chunk of "
                                         "312 elements"),
                       std::exception);
  offload::ParamSwapConfig missing = params_on_nvme(2);
  missing.dir = swap_dir() + "/no-such-dir-for-dsworker";
  spec.tweak = setup(amp::Storage::F32, missing, false, 0);
  CHECK_THROWS_WITH_AS(run_training(spec),
                       doctest::Contains(("zero_optimization.offload_param.nvme_path (rank 0): \"" + missing.dir +
                                          "\": No such file or directory").c_str()),
                       std::exception);
}
