// The engine with its layers on a device backend (engine/device_layers.h): the emulated CUDA backend
// (kernels/cuda on the SIMT emulator, host memory as device memory) against the CPU, at ZeRO stages
// 0-3, one and two ranks, with gradient accumulation, clipping and activation checkpointing; fp16
// and bf16; predictions.
#include <doctest/doctest.h>

#include <map>
#include <memory>

#include "backend/backend.h"
#include "core/errors.h"
#include "counting_device.h"
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

TEST_CASE("engine on the emulated CUDA device: predictions and evaluation after training are the CPU's") {
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
    for (int s = 0; s < 2; ++s) {  // trained first, so a pass must not reuse the parameters a step uploaded
      a.step();
      b.step();
    }
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

// ZeRO-Offload's traffic at g micro-batches of B bytes (inputs, targets, d(total)/d(loss)):
//   up:   the parameters once per step, as stored (4Ψ, or 2Ψ in bf16: the device widens them), on
//         the copy stream at the step's first forward, whatever g and with activation checkpointing's second
//         forward; the gradients never (they start as zeros on the device: bf16's fp32 scratch, stage
//         2's bucket per micro-batch, stages 0-1's sums at the step's first micro-batch); g·B;
//   down: the gradients once per micro-batch, except at stages 0-1 in fp32, where the device sums the
//         step's micro-batches and they come back once; the loss once per micro-batch. The gradients
//         come back on the copy stream (asynchronously, overlapping the layers below), the loss not.
//         (Every step's losses and parameters equal the CPU's in the tests above, where a gradient read
//         before its download was waited for would hold the emulator's NaNs.)
// The parameters and gradients cross from and to pinned host memory (offload's pin_memory, on by
// default; stage 2's fp32 gradients land in pooled buckets, which the engine reserves and pins); the
// engine unpins what it pinned when it goes. With pin_memory off nothing is pinned.
TEST_CASE("engine on the emulated CUDA device: stages 0-2 upload the parameters once per step") {
  DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                {"optimizer", nlohmann::json::parse(kSgd)}},
                                 "test", 1);
  for (int stage : {0, 2}) {
    for (amp::Storage precision : {amp::Storage::F32, amp::Storage::BF16}) {
      CAPTURE(stage);
      CAPTURE(precision == amp::Storage::F32 ? "fp32" : "bf16");
      std::map<int64_t, size_t> per_step, up_async, back_per_step, back_async, pinned_up, pinned_down;  // by micro-batches
      size_t params = 0;
      for (int64_t gas : {1, 3}) {
        run_ranks(1, [&](ProcessGroup& group) {
          CountingDevice device;
          auto plugin = Plugin::load(plugin_path(), kModel, device.table());
          EngineConfig e;
          e.micro_batch = 4;
          e.grad_accum = gas;
          e.zero_stage = stage;
          e.recompute = true;
          e.precision = e.grad_storage = precision;
          e.device = &device;
          {
            Engine engine = make_engine(e, *plugin, group, config);
            params = engine.gather_parameters().size();
            CHECK(engine.device_note().empty());  // everything pinned
            engine.step();
            device.uploaded = device.downloaded = device.uploaded_pinned = device.downloaded_pinned = 0;
            device.uploaded_async = device.downloaded_async = 0;
            engine.step();
            up_async[gas] = device.uploaded_async;
            back_async[gas] = device.downloaded_async;
            per_step[gas] = device.uploaded;
            back_per_step[gas] = device.downloaded;
            pinned_up[gas] = device.uploaded_pinned;
            pinned_down[gas] = device.downloaded_pinned;
          }
          CHECK(device.pinned.empty());
          if (gas > 1 || stage > 0 || precision != amp::Storage::F32) return;
          e.pin_memory = false;
          Engine unpinned = make_engine(e, *plugin, group, config);
          unpinned.step();
          CHECK(device.pinned.empty());
        });
      }
      // B: 4 samples of 12 inputs, their 4 targets and d(total)/d(loss)
      const size_t batch = (4 * 12 + 4 + 1) * sizeof(float);
      const bool summed_on_device = stage == 0 && precision == amp::Storage::F32;
      for (int64_t g : {1, 3}) {
        CAPTURE(g);
        const auto n = static_cast<size_t>(g);
        const size_t grads = (summed_on_device ? 1 : n) * 4 * params;
        const size_t param_bytes = (precision == amp::Storage::F32 ? 4 : 2) * params;
        CHECK(per_step[g] == param_bytes + n * batch);
        CHECK(up_async[g] == param_bytes);
        CHECK(back_per_step[g] == grads + n * sizeof(float));
        CHECK(back_async[g] == grads);
        CHECK(pinned_up[g] == param_bytes);
        CHECK(pinned_down[g] == grads);
      }
    }
  }
}

// Stage 3 uploads each layer's gathered parameters at each call (forward, activation checkpointing's second
// forward, backward), in their stored precision: bf16 sends half fp32's bytes, which the device widens; all on
// the upload stream (after the ops that last read their staging buffer, not after every op), from pinned memory
// (the fetcher pins the buffers it gathers into). The same losses as the CPU's are the other tests'; here, the
// traffic.
TEST_CASE("engine on the emulated CUDA device: stage 3 uploads 16-bit parameters as 16 bits") {
  DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                {"optimizer", nlohmann::json::parse(kSgd)}},
                                 "test", 1);
  std::map<amp::Storage, size_t> param_bytes;  // uploaded per step, the batch's bytes aside
  size_t params = 0;
  for (amp::Storage precision : {amp::Storage::F32, amp::Storage::BF16}) {
    run_ranks(1, [&](ProcessGroup& group) {
      CountingDevice device;
      auto plugin = Plugin::load(plugin_path(), kModel, device.table());
      EngineConfig e;
      e.micro_batch = 4;
      e.zero_stage = 3;
      e.recompute = true;
      e.precision = e.grad_storage = precision;
      e.device = &device;
      {
        Engine engine = make_engine(e, *plugin, group, config);
        params = engine.gather_parameters().size();
        engine.step();
        device.uploaded = device.uploaded_after = device.uploaded_pinned = 0;
        engine.step();
        param_bytes[precision] = device.uploaded - (4 * 12 + 4 + 1) * sizeof(float);  // inputs, targets, dloss
        CHECK(device.uploaded_after == param_bytes[precision]);  // every parameter on the upload stream,
        CHECK(device.uploaded_pinned == param_bytes[precision]);  // from pinned memory (the fetcher's pool)
        CHECK(engine.device_note().empty());
      }
      CHECK(device.pinned.empty());  // the engine unpinned the pool's buffers before they were freed
    });
  }
  MESSAGE("stage 3 uploads per step: fp32 ", param_bytes[amp::Storage::F32], " bytes, bf16 ",
          param_bytes[amp::Storage::BF16], " bytes, for ", params, " parameters");
  CHECK(param_bytes[amp::Storage::F32] >= 2 * 4 * params);  // at least a forward's and a backward's copy
  CHECK(param_bytes[amp::Storage::BF16] * 2 == param_bytes[amp::Storage::F32]);
}

// Where the system refuses to pin, the engine says how much stays pageable (dsworker prints the note at
// start), and again when stage 3's pool makes buffers during training (dsworker prints it after the step).
TEST_CASE("engine on the emulated CUDA device: memory that could not be pinned is in the device note, as it grows") {
  DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                {"optimizer", nlohmann::json::parse(kSgd)}},
                                 "test", 1);
  run_ranks(1, [&](ProcessGroup& group) {
    CountingDevice device;
    device.refuse_pins = true;
    auto plugin = Plugin::load(plugin_path(), kModel, device.table());
    EngineConfig e;
    e.micro_batch = 4;
    e.zero_stage = 3;
    e.stage3.persistence = 0;  // every layer gathered into the pool's buffers, which the first step makes
    e.device = &device;
    Engine engine = make_engine(e, *plugin, group, config);
    const std::string at_start = engine.device_note();
    CHECK(at_start.find("could not be pinned (cudaErrorMemoryAllocation: out of memory)") != std::string::npos);
    engine.step();
    const std::string after_step = engine.device_note();
    CHECK(after_step != at_start);  // the pool's buffers for the gathered layers came during the step
    MESSAGE("at start: ", at_start, "; after the first step: ", after_step);
    engine.step();
    CHECK(engine.device_note() == after_step);  // the pool has all it needs
  });
}

// 16-bit training on the device: the engine widens the parameters and takes the gradients back in
// fp32 as for the CPU's layers; the device rounds each layer's output and input gradient to 16 bits,
// as the CPU does, and its matmuls multiply in 16 bits, as DeepSpeed's fp16 and bf16 models do, where
// the CPU's multiply in fp32 on the rounded values. So the device's run is no farther from the CPU's
// 16-bit run than that run is from fp32 (16-bit precision's own effect; measured in fp16 at 0.7 of
// it, in bf16 at 0.2), and each loss is within the type's unit roundoff (2^-11 fp16, 2^-8 bf16) of
// both (the bound of the mixed-precision tests).
TEST_CASE("engine on the emulated CUDA device: fp16 and bf16 train with 16-bit matmuls") {
  for (amp::Storage p : {amp::Storage::F16, amp::Storage::BF16}) {
    for (int stage : {0, 2, 3}) {
      CAPTURE(p == amp::Storage::F16 ? "fp16" : "bf16");
      CAPTURE(stage);
      RunSpec spec;
      spec.world = 2;
      spec.gas = 2;
      spec.stage = stage;
      spec.optimizer = kSgd;
      spec.steps = 4;
      const Run fp32 = run_training(spec);
      spec.tweak = [p](EngineConfig& e) {
        e.precision = e.grad_storage = p;
        if (p == amp::Storage::F16) e.loss_scaling = amp::LossScalerConfig{};
      };
      const Run cpu = run_training(spec);
      spec.device = emulated_cuda;
      const Run dev = run_training(spec);
      REQUIRE(dev.steps.size() == cpu.steps.size());
      const double to_cpu = relative_difference(dev.params, cpu.params);
      const double effect = relative_difference(cpu.params, fp32.params);  // 16-bit precision's own
      for (size_t s = 0; s < cpu.steps.size(); ++s) {
        CAPTURE(s);
        const double roundoff = p == amp::Storage::F16 ? 0x1p-11 : 0x1p-8;
        CHECK(std::abs(dev.steps[s].loss - cpu.steps[s].loss) <= roundoff * cpu.steps[s].loss);
        CHECK(std::abs(dev.steps[s].loss - fp32.steps[s].loss) <= roundoff * fp32.steps[s].loss);
      }
      MESSAGE("device to CPU ", to_cpu, ", CPU to fp32 ", effect);
      CHECK((to_cpu > 0.0 && to_cpu <= effect));  // > 0: the matmuls did round to 16 bits
    }
  }
}
