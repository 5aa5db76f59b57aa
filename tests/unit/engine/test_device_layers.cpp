// The engine with its layers on a device backend (engine/device_layers.h): the emulated CUDA backend
// (kernels/cuda on the SIMT emulator, host memory as device memory) against the CPU, at ZeRO stages
// 0-3, one and two ranks, with gradient accumulation, clipping and activation checkpointing; fp16
// and bf16; predictions.
#include <doctest/doctest.h>

#include <map>
#include <memory>

#include "backend/backend.h"
#include "core/errors.h"
#include "engine_test_util.h"

using namespace ds;
using namespace ds::test;

namespace {

std::unique_ptr<backend::Device> emulated_cuda() { return std::make_unique<backend::Cuda>(0); }

// The emulated device, counting the bytes copied to it.
class CountingDevice : public backend::Device {
 public:
  const ds_backend* table() const override { return cuda_.table(); }
  std::string describe() const override { return cuda_.describe(); }
  void* allocate(size_t bytes) override { return cuda_.allocate(bytes); }
  void release(void* p) override { cuda_.release(p); }
  void to_device(void* dst, const void* src, size_t bytes) override {
    uploaded += bytes;
    cuda_.to_device(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override { cuda_.to_host(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override { cuda_.zero(dst, bytes); }
  void round_to(amp::Half type, float* x, size_t n) override { cuda_.round_to(type, x, n); }
  void set_bf16_matmuls(bool on) override { cuda_.set_bf16_matmuls(on); }
  size_t uploaded = 0;

 private:
  backend::Cuda cuda_{0};
};

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

// ZeRO-Offload's traffic: at stages 0-2 the parameters go to the device once per step, whatever the
// number of micro-batches and with activation checkpointing's second forward; the rest (gradients,
// the batch) once per micro-batch. So a step uploads 4Ψ + g·M bytes at g micro-batches. In bf16 the
// gradients the plugin adds into start as zeros on the device: 4Ψ fewer bytes per micro-batch.
TEST_CASE("engine on the emulated CUDA device: stages 0-2 upload the parameters once per step") {
  DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                {"optimizer", nlohmann::json::parse(kSgd)}},
                                 "test", 1);
  for (int stage : {0, 2}) {
    std::map<amp::Storage, size_t> micro_batch_bytes;  // M, by precision
    for (amp::Storage precision : {amp::Storage::F32, amp::Storage::BF16}) {
      CAPTURE(stage);
      CAPTURE(precision == amp::Storage::F32 ? "fp32" : "bf16");
      std::map<int64_t, size_t> per_step;  // by micro-batches
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
          Engine engine = make_engine(e, *plugin, group, config);
          params = engine.gather_parameters().size();
          engine.step();
          device.uploaded = 0;
          engine.step();
          per_step[gas] = device.uploaded;
        });
      }
      micro_batch_bytes[precision] = per_step[1] - 4 * params;
      CHECK(per_step[3] == 4 * params + 3 * micro_batch_bytes[precision]);
      if (precision == amp::Storage::BF16)
        CHECK(micro_batch_bytes[amp::Storage::F32] - micro_batch_bytes[amp::Storage::BF16] == 4 * params);
    }
  }
}

// 16-bit training on the device: the engine widens the parameters and takes the gradients back in
// fp32 as for the CPU's layers; the device rounds each layer's output and input gradient to 16 bits.
//   fp16: the device computes in fp32 as the CPU does. Its last bits differ (another GEMM), which can
//         move a value across a 16-bit rounding boundary, so the runs agree to within a small
//         fraction of 16-bit's own effect (the distance of the CPU's 16-bit run from its fp32 run).
//   bf16: the device's matmuls multiply in bf16, as DeepSpeed's bf16 model does, where the CPU's
//         multiply in fp32: the device's run is no farther from the CPU's bf16 run than that run is
//         from fp32, and each loss is within bf16's unit roundoff of both (the bound of the
//         mixed-precision tests).
TEST_CASE("engine on the emulated CUDA device: fp16 trains as on the CPU, bf16 with bf16 matmuls") {
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
        if (p == amp::Storage::F16) {
          CHECK(dev.steps[s].loss == doctest::Approx(cpu.steps[s].loss).epsilon(1e-5));
        } else {
          CHECK(std::abs(dev.steps[s].loss - cpu.steps[s].loss) <= 0x1p-8 * cpu.steps[s].loss);
          CHECK(std::abs(dev.steps[s].loss - fp32.steps[s].loss) <= 0x1p-8 * fp32.steps[s].loss);
        }
      }
      if (p == amp::Storage::F16) CHECK(to_cpu <= 0.1 * effect);
      else CHECK((to_cpu > 0.0 && to_cpu <= effect));  // > 0: the matmuls did round to bf16
    }
  }
}
