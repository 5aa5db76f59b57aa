// The engine with its layers on a device backend (engine/device_layers.h): the emulated CUDA backend
// (kernels/cuda on the SIMT emulator, host memory as device memory) against the CPU, at ZeRO stages
// 0-3, one and two ranks, with gradient accumulation, clipping and activation checkpointing;
// predictions; and the refusal of 16-bit precision there.
#include <doctest/doctest.h>

#include <memory>

#include "backend/backend.h"
#include "core/errors.h"
#include "engine_test_util.h"

using namespace ds;
using namespace ds::test;

namespace {

std::unique_ptr<backend::Device> emulated_cuda() { return std::make_unique<backend::Cuda>(0); }

void check_same_training(RunSpec spec) {
  const Run cpu = run_training(spec);
  spec.device = emulated_cuda;
  const Run dev = run_training(spec);
  REQUIRE(cpu.steps.size() == dev.steps.size());
  CHECK(dev.initial == cpu.initial);  // the engine initialises on the host, as before
  for (size_t s = 0; s < cpu.steps.size(); ++s) {
    CAPTURE(s);
    CHECK(dev.steps[s].loss == doctest::Approx(cpu.steps[s].loss).epsilon(1e-5));
    CHECK(dev.steps[s].grad_norm == doctest::Approx(cpu.steps[s].grad_norm).epsilon(1e-4));
  }
  CHECK(relative_difference(dev.params, cpu.params) < 1e-5);
}

}  // namespace

TEST_CASE("engine on the emulated CUDA device: one rank, stage 0, gives the CPU's losses and parameters") {
  RunSpec spec;
  spec.optimizer = kSgd;  // Adam's first steps magnify rounding differences in near-zero gradients (see docs/cuda.md)
  spec.steps = 6;
  check_same_training(spec);
}

TEST_CASE("engine on the emulated CUDA device: two ranks, stages 1-3, accumulation, clipping, checkpointing") {
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    RunSpec spec;
    spec.world = 2;
    spec.gas = 2;
    spec.clip = 0.5;
    spec.stage = stage;
    spec.optimizer = kSgd;
    spec.steps = 3;
    spec.tweak = [](EngineConfig& e) { e.recompute = true; };
    check_same_training(spec);
  }
}

TEST_CASE("engine on the emulated CUDA device: predictions and evaluation are the CPU's") {
  DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                {"optimizer", nlohmann::json::parse(kSgd)}},
                                 "test", 1);
  run_ranks(1, [&](ProcessGroup& group) {
    backend::Cuda cuda(0);
    auto on_cpu = Plugin::load(plugin_path(), kModel);
    auto on_dev = Plugin::load(plugin_path(), kModel, cuda.table());
    EngineConfig e;
    e.micro_batch = 4;
    Engine a = make_engine(e, *on_cpu, group, config);
    e.device = &cuda;
    Engine b = make_engine(e, *on_dev, group, config);
    std::vector<float> x(3 * 12);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
    const ds_tensor input{x.data(), DS_F32, {2, {3, 12}}, DS_DEVICE_CPU};
    const std::vector<float> pa = a.predict(input), pb = b.predict(input);
    REQUIRE(pa.size() == 3 * 5);
    for (size_t i = 0; i < pa.size(); ++i) CHECK(pb[i] == doctest::Approx(pa[i]).epsilon(1e-5));
    PluginSamples samples(*on_cpu);
    CHECK(b.evaluate(samples, 64) == doctest::Approx(a.evaluate(samples, 64)).epsilon(1e-5));
  });
}

TEST_CASE("engine on a device refuses 16-bit precision, naming the backend") {
  DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                {"optimizer", nlohmann::json::parse(kSgd)}},
                                 "test", 1);
  run_ranks(1, [&](ProcessGroup& group) {
    backend::Cuda cuda(0);
    auto plugin = Plugin::load(plugin_path(), kModel, cuda.table());
    EngineConfig e;
    e.micro_batch = 4;
    e.precision = amp::Storage::BF16;
    e.device = &cuda;
    CHECK_THROWS_WITH_AS(make_engine(e, *plugin, group, config),
                         "bf16 precision on the cuda backend: its ops are fp32 so far; train in fp32 there "
                         "(fp16.enabled and bf16.enabled false)",
                         ConfigError);
  });
}
