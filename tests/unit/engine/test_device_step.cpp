// The optimizer's step on the device (engine/device_step.h), on the emulated CUDA backend: against the
// same device's layers with the optimizer on the host (ZeRO-Offload's path) the parameters are the same
// bits (the element bodies are the CPU loops'; only the norm's summation order differs, which matters
// with clipping alone); a step moves no parameters or gradients between host and device; checkpoints
// and restores see the device's values (the host's copies of the master and state are freed between them);
// tied parameters (GPT's embedding and head) stay one.
#include <doctest/doctest.h>

#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "comm/thread_ranks.h"
#include "counting_device.h"
#include "data/token_dataset.h"
#include "engine_test_util.h"
#ifdef DS_TEST_FAKE_NCCL
#include "comm/nccl_group.h"
#include "../nccl/fake_nccl.h"
#endif

using namespace ds;
using namespace ds::test;

namespace {

std::unique_ptr<backend::Device> emulated_cuda() { return std::make_unique<backend::Cuda>(0); }

const std::string kPlainAdam = R"({"type": "Adam", "params": {"lr": 0.01, "weight_decay": 0.01}})";
const std::string kPlainSgd = R"({"type": "SGD", "params": {"lr": 0.05}})";

// The same device's run with the optimizer on the host, and on the device.
std::pair<Run, Run> host_and_device(RunSpec spec) {
  spec.device = emulated_cuda;
  const auto tweak = spec.tweak;
  const Run host = run_training(spec);
  spec.tweak = [tweak](EngineConfig& e) {
    e.stage3.persistence = 0;  // stage 3: every layer gathered at its use (persistent layers have their own tests)
    if (tweak) tweak(e);
    e.optimizer_on_device = true;
  };
  return {host, run_training(spec)};
}

// The test config (Adam) for `world` ranks, and an engine config with the layers on `device`.
DsConfig adam_config(int world) {
  return parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4}, {"optimizer", nlohmann::json::parse(kAdam)}},
                      "test", world);
}
EngineConfig on(backend::Device& device, bool optimizer_on_device) {
  EngineConfig e;
  e.micro_batch = 4;
  e.device = &device;
  e.optimizer_on_device = optimizer_on_device;
  e.stage3.persistence = 0;  // as host_and_device's
  return e;
}

void set_precision(EngineConfig& e, amp::Storage p) {
  e.precision = p;
  if (p == amp::Storage::F16) e.loss_scaling = amp::LossScalerConfig{};
}

// GPT (2 layers of 16, a vocabulary of 64) on `world` ranks at `stage`, with a unit per layer, 4 steps of 2
// micro-batches with the optimizer on the host and on the device (its ranks' group made by `device_group`;
// none on one rank): the same losses and parameters. One rank at stages 2-3 differs in the last bits: the host
// joins the head's gradient to the embedding's each micro-batch (its 16-bit buckets), the device once per step.
// At stage 3 the layers of at most `persistence` elements stay gathered (GPT's are all that small but for 0).
void gpt_host_and_device(int world, int stage, const decltype(RunSpec::device_group)& device_group,
                         amp::Storage precision = amp::Storage::F32, int64_t persistence = 0) {
  const bool exact = world > 1 || stage < 2;
  const std::string gpt = R"({"n_layer": 2, "n_head": 4, "n_embd": 16, "seq_len": 8, "vocab_size": 64})";
  DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 2},
                                                {"gradient_accumulation_steps", 2},
                                                {"optimizer", nlohmann::json::parse(kAdam)}},
                                 "test", world);
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 8 * 64 + 1; ++i) tokens.push_back(static_cast<uint16_t>(i % 13 * 5 % 64));
  run_ranks(world, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
    backend::Cuda cuda(0);
    auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_gpt.so", gpt, cuda.table());
    const std::unique_ptr<ProcessGroup> devices = device_group ? device_group(store, group.rank(), world) : nullptr;
    TokenDataset data(tokens, 8, "train");
    auto make = [&](bool on_device) {
      EngineConfig e;
      e.micro_batch = 2;
      e.grad_accum = 2;
      e.zero_stage = stage;
      e.precision = precision;
      e.reduce_bucket_elems = e.allgather_bucket_elems = 1;
      e.device = &cuda;
      e.optimizer_on_device = on_device;
      e.device_group = on_device ? devices.get() : nullptr;
      e.stage3.persistence = persistence;
      return Engine(e, *plugin, group, [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r); },
                    make_lr_schedule(config.scheduler, config.optimizer.lr), &data);
    };
    Engine host = make(false), device = make(true);
    REQUIRE(device.optimizer_place().find("on the device") != std::string::npos);
    for (int s = 0; s < 4; ++s) {
      const StepStats h = host.step(), d = device.step();
      if (exact) CHECK(d.loss == h.loss);
      else CHECK(d.loss == doctest::Approx(h.loss).epsilon(1e-6));
    }
    if (exact) CHECK(device.gather_parameters() == host.gather_parameters());
    else CHECK(relative_difference(device.gather_parameters(), host.gather_parameters()) < 1e-5);
    if (world > 1) return;
    // A restore uploads the host's values again (the host remakes the head's fp32 copy for that upload).
    device.restore(host.checkpoint_shard());  // (one rank: its shard is the whole state)
    for (int s = 0; s < 2; ++s) {
      const StepStats h = host.step(), d = device.step();
      if (exact) CHECK(d.loss == h.loss);
      else CHECK(d.loss == doctest::Approx(h.loss).epsilon(1e-6));
    }
    CHECK(device.memory().workspace == 0);  // (that copy and the layer scratch freed again once uploaded)
  });
}

}  // namespace

TEST_CASE("device step: Adam, AdamW, SGD, Lion, Adagrad, RMSprop and LAMB at stages 0, 2 and 3 give the host optimizer's bits") {
  for (const std::string& optimizer : {kAdam, kPlainAdam, kSgd, kPlainSgd, kLion, kAdagrad, kRmsprop, kLamb}) {
    for (int stage : {0, 2, 3}) {
      CAPTURE(optimizer);
      CAPTURE(stage);
      RunSpec spec;
      spec.gas = 2;
      spec.stage = stage;
      spec.optimizer = optimizer;
      spec.steps = 4;
      spec.every_step = true;  // the host's copies brought up to date between steps, which must not disturb them
      const auto [host, device] = host_and_device(spec);
      for (size_t s = 0; s < host.steps.size(); ++s) {
        CAPTURE(s);
        CHECK(device.steps[s].loss == host.steps[s].loss);
        CHECK(device.steps[s].grad_norm == doctest::Approx(host.steps[s].grad_norm).epsilon(1e-12));
      }
      if (optimizer == kLamb) CHECK(relative_difference(device.params, host.params) < 1e-6);  // sums' order
      else CHECK(device.params == host.params);
    }
  }
}

TEST_CASE("device step: fp16 with loss scaling and bf16 keep an fp32 master there") {
  for (amp::Storage p : {amp::Storage::F16, amp::Storage::BF16}) {
    CAPTURE(p == amp::Storage::F16 ? "fp16" : "bf16");
    RunSpec spec;
    spec.gas = 2;
    spec.steps = 5;
    spec.tweak = [p](EngineConfig& e) { set_precision(e, p); };
    const auto [host, device] = host_and_device(spec);
    for (size_t s = 0; s < host.steps.size(); ++s) {
      CAPTURE(s);
      CHECK(device.steps[s].loss == host.steps[s].loss);
      CHECK(device.steps[s].loss_scale == host.steps[s].loss_scale);
      CHECK(device.steps[s].skipped == host.steps[s].skipped);
    }
    CHECK(device.params == host.params);  // gather_parameters: the fp32 master
    // The layers' fp32 parameters on the device; the 16-bit upload buffers beside them only where the
    // parameters are uploaded every step (the optimizer on the host): the device step frees them once widened.
    REQUIRE((host.device_memory && device.device_memory));
    CHECK(2 * host.device_memory->params == 3 * device.device_memory->params);
  }
}

// The device sums a step's micro-batches in fp32 and rounds the sum to the 16-bit type after each (as the
// host's 16-bit buffer holds it): stage 1 gives the host's bits. At stage 2 the host also rounds each
// micro-batch's gradient before adding it (its reduction buckets are 16-bit, as DeepSpeed's): the same
// bits with one micro-batch per step, within the type's rounding with several.
TEST_CASE("device step: 16-bit gradient accumulation (DeepSpeed's default at ZeRO 1-2) as the host's buffers") {
  struct Case {
    int stage, gas;
  };
  for (amp::Storage p : {amp::Storage::F16, amp::Storage::BF16})
    for (const std::string& optimizer : {kAdam, kPlainSgd})
      for (const Case c : {Case{1, 3}, Case{2, 1}, Case{2, 3}}) {
        CAPTURE(p == amp::Storage::F16 ? "fp16" : "bf16");
        CAPTURE(optimizer);
        CAPTURE(c.stage);
        CAPTURE(c.gas);
        RunSpec spec;
        spec.gas = c.gas;
        spec.steps = 5;
        spec.stage = c.stage;
        spec.optimizer = optimizer;
        spec.tweak = [p](EngineConfig& e) {
          set_precision(e, p);
          e.grad_storage = p;
        };
        const auto [host, device] = host_and_device(spec);
        REQUIRE(device.optimizer_place.find("on the device") != std::string::npos);
        const bool exact = c.stage == 1 || c.gas == 1;
        const double rounding = p == amp::Storage::BF16 ? 0x1p-8 : 0x1p-11;
        for (size_t s = 0; s < host.steps.size(); ++s) {
          CAPTURE(s);
          if (exact) {
            CHECK(device.steps[s].loss == host.steps[s].loss);
            CHECK(device.steps[s].grad_norm == doctest::Approx(host.steps[s].grad_norm).epsilon(1e-12));
          } else {
            CHECK(device.steps[s].loss == doctest::Approx(host.steps[s].loss).epsilon(rounding));
            CHECK(device.steps[s].grad_norm == doctest::Approx(host.steps[s].grad_norm).epsilon(rounding));
          }
        }
        if (exact) CHECK(device.params == host.params);
        else CHECK(relative_difference(device.params, host.params) < rounding);
      }
}

TEST_CASE("device step: clipping by the device's norm") {
  RunSpec spec;
  spec.gas = 3;
  spec.clip = 0.05;  // below the norm: every step clips
  spec.steps = 4;
  const auto [host, device] = host_and_device(spec);
  for (size_t s = 0; s < host.steps.size(); ++s) REQUIRE(host.steps[s].grad_norm > spec.clip);
  CHECK(relative_difference(device.params, host.params) < 1e-6);
  CHECK(device.params != device.initial);
}

// SGD, with momentum and without, updates every tensor in one call (one launch on a GPU), as Adam does.
// SGD updates every tensor in one call, as Adam does; LAMB in two (the moments and sums, then the update, the
// host forming the trust ratios between them), not two per tensor.
TEST_CASE("device step: SGD, Lion, Adagrad and RMSprop step every tensor in one call, LAMB in two") {
  for (const std::string& optimizer : {kSgd, kPlainSgd, kLion, kAdagrad, kRmsprop, kLamb}) {
    CAPTURE(optimizer);
    const DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                        {"optimizer", nlohmann::json::parse(optimizer)}},
                                         "test", 1);
    run_ranks(1, [&](ProcessGroup& group) {
      CountingDevice device;
      auto plugin = Plugin::load(plugin_path(), kModel, device.table());
      Engine engine = make_engine(on(device, true), *plugin, group, config);
      REQUIRE(engine.optimizer_place().find("on the device") != std::string::npos);
      engine.step();
      device.sgd_calls = device.lion_calls = device.adagrad_calls = device.rmsprop_calls = device.lamb_calls = 0;
      engine.step();
      const bool lamb = optimizer == kLamb, lion = optimizer == kLion, adagrad = optimizer == kAdagrad,
                 rmsprop = optimizer == kRmsprop;
      CHECK(device.sgd_calls == (lamb || lion || adagrad || rmsprop ? 0 : 1));
      CHECK(device.lion_calls == (lion ? 1 : 0));
      CHECK(device.adagrad_calls == (adagrad ? 1 : 0));
      CHECK(device.rmsprop_calls == (rmsprop ? 1 : 0));
      CHECK(device.lamb_calls == (lamb ? 2 : 0));
      CHECK(engine.slots().size() > 1);
    });
  }
}

// RMSprop with momentum or centered (two or three state buffers) has no device kernel: it steps on the host and
// the start line says why.
TEST_CASE("device step: RMSprop with momentum or centered steps on the CPU and says why") {
  const DsConfig config = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 4},
                                                      {"optimizer", nlohmann::json::parse(kRmspropFull)}},
                                       "test", 1);
  run_ranks(1, [&](ProcessGroup& group) {
    CountingDevice device;
    auto plugin = Plugin::load(plugin_path(), kModel, device.table());
    Engine engine = make_engine(on(device, true), *plugin, group, config);
    CHECK(engine.optimizer_place().find("this optimizer (or its bf16 state) runs on the host only") !=
          std::string::npos);
    engine.step();
    CHECK(device.rmsprop_calls == 0);
  });
}

// What crosses per step: the micro-batches up, each micro-batch's loss and the squared norm down; what the
// host keeps meanwhile.
TEST_CASE("device step: a step moves no parameters or gradients between host and device") {
  const DsConfig config = adam_config(1);
  for (int stage : {0, 2, 3}) {
    for (amp::Storage precision : {amp::Storage::F32, amp::Storage::BF16}) {
      for (int64_t gas : {1, 3}) {
        CAPTURE(stage);
        CAPTURE(gas);
        run_ranks(1, [&](ProcessGroup& group) {
          CountingDevice device;
          auto plugin = Plugin::load(plugin_path(), kModel, device.table());
          EngineConfig e = on(device, true);
          e.grad_accum = gas;
          e.zero_stage = stage;
          e.precision = precision;
          e.gradient_clipping = 1e-6;  // below every norm
          Engine engine = make_engine(e, *plugin, group, config);
          CHECK(engine.optimizer_place().find("on the device") != std::string::npos);
          engine.step();  // the parameters' first upload, and the master's and state's
          device.uploaded = device.downloaded = device.adam_calls = device.rescale_calls = 0;
          engine.step();
          CHECK(device.adam_calls == 1);  // every tensor's AdamW in one call: one launch
          CHECK(device.rescale_calls == 1);  // likewise the clipping factor's scaling (each step clips)
          const auto n = static_cast<size_t>(gas);
          CHECK(device.uploaded == n * (4 * 12 + 4 + 1) * sizeof(float));  // inputs, targets, d(total)/d(loss)
          CHECK(device.downloaded == n * sizeof(float) + sizeof(double));  // the losses, Σg²
          // At stages 0-2 the host keeps no parameters either (the first upload's source: unpinned and freed
          // after the update; stage 3's partition stays), until a checkpoint reads them.
          if (stage < 3) CHECK(engine.memory().params == 0);
          CHECK(engine.memory().optimizer_state == 0);
          // What the run's summary reports: each kind at its most, the parameters and the 16-bit training's fp32
          // master as they were before the first update freed them (Adam's fresh state was never on the host).
          const bool fp32 = precision == amp::Storage::F32;
          if (stage < 3) CHECK(engine.peak_memory().params == engine.num_parameters() * (fp32 ? 4 : 2));
          CHECK(engine.peak_memory().optimizer_state == (fp32 ? 0 : engine.num_parameters() * 4));
          CHECK(device.pinned.empty());
          CHECK(engine.memory().grads == 0);  // nor does the host keep a gradient buffer the device fills
          // nor the layers' activations, their gradients or workspaces: the micro-batch and the loss only
          CHECK(engine.memory().activations == (4 * 12 + 4 + 1) * sizeof(float));
          CHECK(engine.memory().workspace == 0);  // (16-bit training's layer scratch: made only for an upload)
          (void)engine.checkpoint_shard();
          CHECK(engine.memory().params > 0);
        });
      }
    }
  }
}

// wall_clock_breakdown: the engine waits for the device at the end of the backward passes, the reduction
// and the update, so each phase's time holds the device's work (the forward's end already waits: its loss
// comes back); without it, the step issues work without waiting.
TEST_CASE("device step: timed phases wait for the device at each phase's end") {
  const DsConfig config = adam_config(1);
  for (bool timed : {false, true}) {
    CAPTURE(timed);
    run_ranks(1, [&](ProcessGroup& group) {
      CountingDevice device;
      auto plugin = Plugin::load(plugin_path(), kModel, device.table());
      EngineConfig e = on(device, true);
      e.grad_accum = 3;
      e.timed_phases = timed;
      Engine engine = make_engine(e, *plugin, group, config);
      engine.step();
      const size_t before = device.synchronized;
      engine.step();
      CHECK(device.synchronized - before == (timed ? 3u + 2u : 0u));  // each backward, the reduction, the update
    });
  }
}

// A checkpoint taken after device steps holds the device's values; restored into another engine, they
// go back to the device, and training goes on as if never interrupted. Predictions read the updated
// parameters on the device.
TEST_CASE("device step: checkpoints, restores and predictions see the device's values") {
  for (int stage : {0, 3})
  for (amp::Storage precision : {amp::Storage::F32, amp::Storage::BF16}) {
    CAPTURE(stage);
    CAPTURE(precision == amp::Storage::F32 ? "fp32" : "bf16");
    const DsConfig config = adam_config(1);
    run_ranks(1, [&](ProcessGroup& group) {
      backend::Cuda cuda(0);
      auto plugin = Plugin::load(plugin_path(), kModel, cuda.table());
      EngineConfig e = on(cuda, false);
      e.zero_stage = stage;
      e.precision = precision;
      Engine on_host = make_engine(e, *plugin, group, config);
      e.optimizer_on_device = true;
      Engine on_device = make_engine(e, *plugin, group, config);
      Engine resumed = make_engine(e, *plugin, group, config);
      // A fresh optimizer state is not on the host (the device zeroes its own at the first update); a
      // checkpoint taken before any step holds the host engine's values all the same (zeros).
      if (precision == amp::Storage::F32) CHECK(on_device.memory().optimizer_state == 0);
      else CHECK(on_device.memory().optimizer_state == on_device.model_parameters() * sizeof(float));  // the master
      CHECK(on_device.checkpoint_shard().tensors == on_host.checkpoint_shard().tensors);
      for (int s = 0; s < 3; ++s) {
        on_host.step();
        on_device.step();
      }
      // The host's copies of the master and state are freed while the device holds them, and made for a checkpoint.
      const size_t state_bytes = on_host.memory().optimizer_state;
      CHECK(state_bytes > 0);
      CHECK(on_device.memory().optimizer_state == 0);
      const TrainingState a = on_host.checkpoint_shard(), b = on_device.checkpoint_shard();
      CHECK(on_device.memory().optimizer_state == state_bytes);
      REQUIRE(a.tensors.size() == 3);  // master, exp_avg, exp_avg_sq
      for (size_t k = 0; k < a.tensors.size(); ++k) {
        CAPTURE(a.tensors[k].first);
        CHECK(b.tensors[k] == a.tensors[k]);
      }
      resumed.step();  // its own values on the device, which the restore replaces
      CHECK(resumed.memory().optimizer_state == 0);
      resumed.restore(b);
      CHECK(resumed.memory().optimizer_state == state_bytes);
      std::vector<float> x(3 * 12);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
      const ds_tensor input{x.data(), DS_F32, {2, {3, 12}}, DS_DEVICE_CPU};
      CHECK(resumed.predict(input) == on_host.predict(input));
      CHECK(on_device.predict(input) == on_host.predict(input));
      for (int s = 0; s < 2; ++s) {
        const StepStats h = on_host.step(), r = resumed.step();
        CHECK(r.loss == h.loss);
        on_device.step();
      }
      CHECK(resumed.memory().optimizer_state == 0);  // freed again at the update
      CHECK(resumed.gather_parameters() == on_host.gather_parameters());
      CHECK(on_device.gather_parameters() == on_host.gather_parameters());
      CHECK(on_device.checkpoint_shard().tensors == on_host.checkpoint_shard().tensors);  // (freed and made again)
    });
  }
}

// GPT ties its head to the token embedding: the head's gradient joins the embedding's before the norm
// and the update, and the head's copy takes the updated values.
TEST_CASE("device step: GPT's tied embedding and head") {
  gpt_host_and_device(1, 0, nullptr);
  gpt_host_and_device(1, 0, nullptr, amp::Storage::BF16);  // the head's upload widens the embedding's values
  gpt_host_and_device(1, 3, nullptr);  // the head reads its copy of the embedding's gathered values
  gpt_host_and_device(1, 3, nullptr, amp::Storage::F32, 100'000);  // (every layer kept gathered; a restore drops them)
}

#ifdef DS_TEST_FAKE_NCCL
namespace {

std::unique_ptr<ProcessGroup> fake_device_group(std::shared_ptr<Store> store, int rank, int size) {
  return make_nccl_group(fake_nccl_api(), std::move(store), rank, size, "dp-nccl", std::chrono::seconds(30), rank);
}

// The optimizer on `device` at `stage` with the ranks' group `devices`, 2 micro-batches per step, a unit per layer.
EngineConfig units_per_layer(backend::Device& device, int stage, ProcessGroup* devices) {
  EngineConfig e = on(device, true);
  e.zero_stage = stage;
  e.grad_accum = 2;
  e.reduce_bucket_elems = e.allgather_bucket_elems = 1;
  e.device_group = devices;
  return e;
}

// A device group that notes, at each collective's start, how many of the layers' calls the device had ordered
// after its copies (ops_after_copies: the backward's, each waiting for its buffers).
class StartsNoted final : public ProcessGroup {
 public:
  StartsNoted(std::unique_ptr<ProcessGroup> group, const CountingDevice& device)
      : group_(std::move(group)), device_(device) {}
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  const CommsLogger& comms() const override { return group_->comms(); }
  const char* transport() const override { return group_->transport(); }
  std::unique_ptr<Work> allreduce_async(void* data, size_t count, DataType type, ReduceOp op) override {
    return noted(group_->allreduce_async(data, count, type, op));
  }
  std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, DataType type,
                                             ReduceOp op) override {
    return noted(group_->reduce_scatter_async(in, out, count, type, op));
  }
  std::unique_ptr<Work> allgather_async(const void* in, void* out, size_t count, DataType type) override {
    return noted(group_->allgather_async(in, out, count, type));
  }
  std::unique_ptr<Work> alltoall_async(const void* in, void* out, size_t count, DataType type) override {
    return noted(group_->alltoall_async(in, out, count, type));
  }
  std::unique_ptr<Work> broadcast_async(void* data, size_t count, DataType type, int root) override {
    return noted(group_->broadcast_async(data, count, type, root));
  }
  std::unique_ptr<Work> barrier_async() override { return noted(group_->barrier_async()); }

  std::vector<size_t> starts;  // the device's ordered_after_copies at each collective's start

 private:
  std::unique_ptr<Work> noted(std::unique_ptr<Work> work) {
    starts.push_back(device_.ordered_after_copies);
    return work;
  }
  std::unique_ptr<ProcessGroup> group_;
  const CountingDevice& device_;
};

}  // namespace

// Two ranks: each unit's gradients all-reduced in device memory by the NCCL group (the fake: Gloo over host
// memory, which the emulated device's is), averaged as the host's reducer averages them; at stage 0 every rank
// steps its replica there, at stages 1-2 its partition's parts, and the updated parts are all-gathered there.
// Sums of two addends do not depend on their order: the same bits as the host's reductions and optimizer,
// replicas included (run_training checks that the ranks agree).
TEST_CASE("device step: two ranks reduce the gradients and gather the partitions over NCCL in device memory") {
  for (const std::string& optimizer : {kAdam, kSgd, kLion, kAdagrad, kLamb})
  for (int stage : {0, 1, 2, 3})
  for (amp::Storage precision : {amp::Storage::F32, amp::Storage::BF16})
  for (bool prescale : {false, true})
  for (bool one_unit : {false, true}) {  // a unit per layer (several sums under way at once during backward), or one
    {
      CAPTURE(optimizer);
      CAPTURE(stage);
      CAPTURE(precision == amp::Storage::F32 ? "fp32" : "bf16");
      CAPTURE(prescale);
      CAPTURE(one_unit);
      RunSpec spec;
      spec.stage = stage;
      spec.world = 2;
      spec.gas = 2;
      spec.steps = 5;  // (the warm-up's first two steps have lr 0: the later losses read the gathered updates)
      spec.optimizer = optimizer;
      spec.tweak = [prescale, precision, one_unit](EngineConfig& e) {
        set_precision(e, precision);
        e.prescale_gradients = prescale;
        e.predivide_factor = 4.0;  // (without prescale: ×1/4 before the sum, ×4/2 after)
        e.reduce_bucket_elems = e.allgather_bucket_elems = one_unit ? 1'000'000 : 1;
      };
      spec.device_group = fake_device_group;
      const auto [host, device] = host_and_device(spec);
      for (size_t s = 0; s < host.steps.size(); ++s) {
        CAPTURE(s);
        CHECK(device.steps[s].loss == host.steps[s].loss);
        CHECK(device.steps[s].grad_norm == doctest::Approx(host.steps[s].grad_norm).epsilon(1e-12));
      }
      // (stage 2 sums each micro-batch into the partition, (a₁ + b₁) + (a₂ + b₂), as the host does)
      if (optimizer == kLamb) CHECK(relative_difference(device.params, host.params) < 1e-6);
      else CHECK(device.params == host.params);
    }
  }
}

// Clipping on two ranks: every rank's norm sums its partition's parts, and the factor scales the sums it
// updates (at stage 2 those in the gradient partition).
TEST_CASE("device step: clipping on two ranks, partitioned") {
  for (int stage : {1, 2}) {
    CAPTURE(stage);
    RunSpec spec;
    spec.world = 2;
    spec.stage = stage;
    spec.gas = 2;
    spec.clip = 0.05;  // below the norm: every step clips
    spec.steps = 4;
    spec.device_group = fake_device_group;
    const auto [host, device] = host_and_device(spec);
    REQUIRE(device.optimizer_place.find("on the device") != std::string::npos);
    for (size_t s = 0; s < host.steps.size(); ++s) {
      REQUIRE(host.steps[s].grad_norm > spec.clip);
      CHECK(device.steps[s].grad_norm == doctest::Approx(host.steps[s].grad_norm).epsilon(1e-12));
    }
    CHECK(relative_difference(device.params, host.params) < 1e-6);
    CHECK(device.params != device.initial);
  }
}

// 16-bit gradient accumulation: the host reduces the bf16 buffers in bf16; so does the device (the all-reduces
// of stage 0 and the reduce-scatters of stages 1-3 move bf16), on three ranks too, where each addition's
// rounding shows.
TEST_CASE("device step: two and three ranks with bf16 gradient accumulation") {
  for (int world : {2, 3})
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(world);
    CAPTURE(stage);
    RunSpec spec;
    spec.stage = stage;
    spec.world = world;
    spec.gas = 2;
    spec.steps = 5;
    spec.tweak = [](EngineConfig& e) {
      set_precision(e, amp::Storage::BF16);
      e.grad_storage = amp::Storage::BF16;
    };
    spec.device_group = fake_device_group;
    const auto [host, device] = host_and_device(spec);
    REQUIRE(device.optimizer_place.find("on the device") != std::string::npos);
    for (size_t s = 0; s < host.steps.size(); ++s) {
      CAPTURE(s);
      CHECK(device.steps[s].loss == host.steps[s].loss);
      CHECK(device.steps[s].grad_norm == doctest::Approx(host.steps[s].grad_norm).epsilon(1e-12));
    }
    CHECK(device.params == host.params);
  }
}

// Partitioned, each rank needs the sums of its parts only: the gradients are reduce-scattered (each rank
// sends half of the model's bytes at two ranks) and the updated parameters all-gathered (the other half),
// where all-reducing them would send one and a half times that. In bf16 the parameters are gathered in 16
// bits (the gradients, accumulated in fp32, are summed in fp32): three quarters of that; with bf16 gradient
// accumulation they are reduce-scattered in 16 bits too: half.
TEST_CASE("device step: partitioned, the gradients are reduce-scattered, not all-reduced") {
  const DsConfig config = adam_config(2);
  struct Case {
    amp::Storage precision, grads;
    double share;  // of the model's fp32 bytes
  };
  for (const Case c : {Case{amp::Storage::F32, amp::Storage::F32, 1.0}, Case{amp::Storage::BF16, amp::Storage::F32, 0.75},
                       Case{amp::Storage::BF16, amp::Storage::BF16, 0.5}}) {
    const amp::Storage precision = c.precision;
    CAPTURE(precision == amp::Storage::F32 ? "fp32" : "bf16");
    CAPTURE(c.grads == amp::Storage::F32 ? "fp32 gradients" : "bf16 gradients");
    run_ranks(2, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
      backend::Cuda cuda(0);
      auto plugin = Plugin::load(plugin_path(), kModel, cuda.table());
      auto nccl = fake_device_group(store, group.rank(), group.size());
      EngineConfig e = on(cuda, true);
      e.zero_stage = 1;
      e.precision = precision;
      e.grad_storage = c.grads;
      e.device_group = nccl.get();
      Engine engine = make_engine(e, *plugin, group, config);
      REQUIRE(engine.optimizer_place().find("on the device") != std::string::npos);
      engine.step();
      const uint64_t before = nccl->comms().sent_bytes();
      engine.step();
      const double sent = static_cast<double>(nccl->comms().sent_bytes() - before);
      const double model = static_cast<double>(engine.gather_parameters().size() * sizeof(float));
      CHECK(sent >= c.share * model);  // the units' padding aside
      CHECK(sent < (c.share + 0.25) * model);
    });
  }
}

// The sums start while backward goes on: each unit's as the step's last backward pass is done with it. With a
// unit per layer, the layers' backward calls go on between the first two sums' starts; summing after backward
// would start them with nothing between (stage 1's reduce-scatters) or start one all-reduce of everything
// (stage 0's). The host never waits for the device's ops before a collective (the group orders after them).
TEST_CASE("device step: the gradients' sums start during the last backward pass") {
  for (int stage : {0, 1}) {
    CAPTURE(stage);
    const DsConfig config = adam_config(2);
    run_ranks(2, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
      CountingDevice device;
      auto plugin = Plugin::load(plugin_path(), kModel, device.table());
      StartsNoted nccl(fake_device_group(store, group.rank(), group.size()), device);
      Engine engine = make_engine(units_per_layer(device, stage, &nccl), *plugin, group, config);
      REQUIRE(engine.optimizer_place().find("on the device") != std::string::npos);
      engine.step();
      nccl.starts.clear();
      const size_t synchronized = device.synchronized;
      engine.step();
      const std::set<size_t> distinct(nccl.starts.begin(), nccl.starts.end());
      CHECK(distinct.size() >= 2);
      CHECK(device.synchronized == synchronized);
    });
  }
}

// Replicas (stage 0) sum each unit's gradients with one all-reduce of its flat buffer, as DeepSpeed sums its
// buckets, not one per tensor (148 NCCL calls for GPT-2's tensors, where its units are a handful); with bf16
// gradient accumulation the buffer moves bf16, as the host's reducer and DeepSpeed move it: half the bytes.
TEST_CASE("device step: replicas all-reduce one flat buffer per unit, in the gradients' precision") {
  const DsConfig config = adam_config(2);
  run_ranks(2, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
    CountingDevice device;
    auto plugin = Plugin::load(plugin_path(), kModel, device.table());
    StartsNoted nccl(fake_device_group(store, group.rank(), group.size()), device);
    uint64_t sent[2] = {};
    size_t workspace[2][2] = {};  // [bf16 gradients][one unit]: the device's
    for (amp::Storage grads : {amp::Storage::F32, amp::Storage::BF16})
    for (bool one_unit : {false, true}) {
      CAPTURE(grads == amp::Storage::F32 ? "fp32 gradients" : "bf16 gradients");
      CAPTURE(one_unit);
      EngineConfig e = units_per_layer(device, 0, &nccl);
      set_precision(e, amp::Storage::BF16);
      e.grad_storage = grads;
      if (one_unit) e.reduce_bucket_elems = 1'000'000;
      Engine engine = make_engine(e, *plugin, group, config);
      REQUIRE(engine.optimizer_place().find("on the device") != std::string::npos);
      engine.step();
      nccl.starts.clear();
      device.move_calls = 0;
      const uint64_t before = nccl.comms().sent_bytes();
      engine.step();
      size_t units = 0;
      for (const zero::Unit& u : engine.layout().units()) units += u.size > 0 ? 1 : 0;
      CHECK((units == 1) == one_unit);
      CHECK(engine.slots().size() > units);  // (each layer's weight and bias)
      CHECK(nccl.starts.size() == units);  // (the step's norm and loss go through the host's group)
      CHECK(device.move_calls == 2 * units);  // each unit's tensors into its buffer in one call, and back
      sent[grads == amp::Storage::BF16] += nccl.comms().sent_bytes() - before;
      workspace[grads == amp::Storage::BF16][one_unit] = engine.device_memory()->workspace;
    }
    CHECK(sent[1] * 2 == sent[0]);
    // The units' buffers (two, of the largest unit's size; one where one unit has parameters) hold the moved
    // type: 16 bits with bf16 gradients, half fp32's bytes.
    const size_t mlp_units[2] = {12 * 24 + 24, 12 * 24 + 24 + 24 * 5 + 5};  // [one unit]: the largest's elements
    for (bool one_unit : {false, true})
      CHECK(workspace[0][one_unit] - workspace[1][one_unit] == (one_unit ? 1 : 2) * mlp_units[one_unit] * 2);
  });
}

// An exchange's flat buffer is filled by the tensors' copies; only its padding (the unit's elements past its
// tensors, up to a multiple of the ranks: none at stage 0, whose units are not partitioned) is zeroed, not the
// whole buffer before the copies write it again. The bytes a step zeroes on two ranks are those on one rank (the
// layers' gradient buffers) plus the padding of the reduce-scatters' inputs (rank 0's chunks of the parameters'
// all-gathers have none: its parts fill them).
TEST_CASE("device step: an exchange zeroes only its buffer's padding") {
  for (int stage : {0, 1})
  for (amp::Storage grads : {amp::Storage::F32, amp::Storage::BF16}) {
    CAPTURE(stage);
    CAPTURE(grads == amp::Storage::F32 ? "fp32 gradients" : "bf16 gradients");
    size_t zeroed[2] = {}, padding = 0;  // [two ranks]: rank 0's
    for (int world : {1, 2})
      run_ranks(world, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
        CountingDevice device;
        auto plugin = Plugin::load(plugin_path(), kModel, device.table());
        auto nccl = world > 1 ? fake_device_group(store, group.rank(), group.size()) : nullptr;
        EngineConfig e = units_per_layer(device, stage, nccl.get());
        set_precision(e, amp::Storage::BF16);
        e.grad_storage = grads;
        Engine engine = make_engine(e, *plugin, group, adam_config(world));
        REQUIRE(engine.optimizer_place().find("on the device") != std::string::npos);
        engine.step();
        const size_t before = device.zeroed;
        engine.step();
        if (group.rank() > 0) return;
        zeroed[world - 1] = device.zeroed - before;
        if (world == 1) return;
        const size_t element = grads == amp::Storage::BF16 ? 2 : 4;  // the buffer holds the gradients' type
        for (const zero::Unit& u : engine.layout().units())
          if (u.size > 0) padding += (u.padded() - u.size) * element;
      });
    CHECK((padding > 0) == (stage == 1));  // (the MLP's second layer: 125 elements, padded to 126 on two ranks)
    CHECK(zeroed[1] == zeroed[0] + padding);
  }
}

// The multi-tensor launches' tables (AdamW, the norm, the 16-bit roundings in backward and after the update)
// are the same at every step: the backend keeps them on the device, and a step after the first uploads none
// (an upload from pageable memory would make the host wait for the GPU's queue, in backward too). On one rank
// and on two, at every stage, with bf16 gradient accumulation and a unit per layer (the most tables).
TEST_CASE("device step: a step after the first uploads no multi-tensor table") {
  const DsConfig config = adam_config(2);
  for (int world : {1, 2})
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(world);
    CAPTURE(stage);
    run_ranks(world, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
      backend::Cuda cuda(0);
      auto plugin = Plugin::load(plugin_path(), kModel, cuda.table());
      auto nccl = world > 1 ? fake_device_group(store, group.rank(), group.size()) : nullptr;
      EngineConfig e = units_per_layer(cuda, stage, nccl.get());
      set_precision(e, amp::Storage::BF16);
      e.grad_storage = amp::Storage::BF16;
      Engine engine = make_engine(e, *plugin, group, world > 1 ? config : adam_config(1));
      REQUIRE(engine.optimizer_place().find("on the device") != std::string::npos);
      engine.step();
      const size_t uploads = cuda.table_uploads();
      CHECK(uploads > 0);
      engine.step();
      engine.step();
      CHECK(cuda.table_uploads() == uploads);
    });
  }
}

// GPT's tie on two ranks, partitioned with a unit per layer: the head's gradient joins the embedding's
// as the last backward pass is done with the embedding's unit, before its reduce-scatter starts.
TEST_CASE("device step: GPT's tied embedding and head on two ranks, each layer's sum started in backward") {
  gpt_host_and_device(2, 1, fake_device_group);
}

// At stage 2 the partition is all a rank keeps of the step's gradients: each micro-batch's units are
// reduce-scattered as backward finishes them and added into it.
TEST_CASE("device step: GPT's tied embedding and head on two ranks at stage 2") {
  gpt_host_and_device(2, 2, fake_device_group);
}

// At stage 3 each layer is gathered on the device from the ranks' partitions; the head reads its copy of the
// embedding's values, taken at the embedding's gather (once per update when the embedding is persistent).
TEST_CASE("device step: GPT's tied embedding and head on two ranks at stage 3") {
  gpt_host_and_device(2, 3, fake_device_group);
  gpt_host_and_device(2, 3, fake_device_group, amp::Storage::F32, 100'000);
}

namespace {

// An MLP of 16 blocks (many small units) on two ranks with the fake NCCL group as the device group:
// f(group, cuda, plugin, nccl, config) on each rank, Adam's config for two ranks.
template <class F>
void on_deep_mlp(F f) {
  const std::string model = R"({"in_features": 12, "hidden": 24, "layers": 16, "classes": 5, "num_samples": 256})";
  const DsConfig config = adam_config(2);
  run_ranks(2, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
    backend::Cuda cuda(0);
    auto plugin = Plugin::load(plugin_path(), model, cuda.table());
    auto nccl = fake_device_group(store, group.rank(), group.size());
    f(group, cuda, *plugin, *nccl, config);
  });
}

}  // namespace

// stage3_param_persistence_threshold on the device: a layer of at most that many elements (while the kept
// layers add up to at most stage3_model_persistence_threshold) is gathered at its first use after an update and
// stays, in views of its own, until the next: once per step, where the others are gathered at each use (each
// micro-batch's forward and backward). The values are the same gathered bits either way.
TEST_CASE("device step: at stage 3 the persistent layers are gathered once per update") {
  on_deep_mlp([](ProcessGroup& group, backend::Cuda& cuda, Plugin& plugin, auto& nccl, const DsConfig& config) {
    struct Result {
      int64_t gathers = 0;  // in the last step
      std::vector<float> losses, params;
      size_t device_params = 0;  // bytes
    };
    size_t units = 0, psi = 0;
    auto train = [&](int64_t persistence, int64_t model_persistence) {
      EngineConfig e = units_per_layer(cuda, 3, &nccl);
      e.stage3.persistence = persistence;
      e.stage3.model_persistence = model_persistence;
      Engine engine = make_engine(e, plugin, group, config);
      REQUIRE(engine.optimizer_place().find("gathered there") != std::string::npos);
      Result r;
      for (int s = 0; s < 4; ++s) {
        const int64_t before = nccl.comms().stats("allgather").count;
        r.losses.push_back(engine.step().loss);
        r.gathers = nccl.comms().stats("allgather").count - before;
      }
      units = 0;
      for (const zero::Unit& u : engine.layout().units()) units += u.size > 0;  // (a ReLU's has none)
      r.params = engine.gather_parameters();
      psi = r.params.size();
      r.device_params = engine.device_memory()->params;
      return r;
    };
    const Result none = train(0, INT64_MAX), all = train(100'000, INT64_MAX), half = train(100'000, 0);
    CHECK(all.gathers == static_cast<int64_t>(units));
    CHECK(none.gathers >= 3 * all.gathers);             // 2 micro-batches, a forward and a backward each
    CHECK(half.gathers == none.gathers);                // a model cap of 0 keeps none
    const Result some = train(100'000, static_cast<int64_t>(psi / 2));
    CHECK(some.gathers > all.gathers);
    CHECK(some.gathers < none.gathers);
    for (const Result* r : {&all, &half, &some}) {
      CHECK(r->losses == none.losses);
      CHECK(r->params == none.params);
    }
    // The kept layers' views are beside the two slots (the layers not kept take those in turn).
    CHECK(all.device_params >= (psi + psi / 2) * sizeof(float));  // the whole model's views and the partition
    CHECK(all.device_params > none.device_params);
    CHECK(some.device_params > none.device_params);
    CHECK(some.device_params < all.device_params);
  });
}

// Stage 2's point is memory: the device holds this rank's partition of the gradients and one unit's, where
// stage 1 holds every layer's. Stage 3's: it also holds this rank's partition of the parameters and two
// layers' (and one landing gather), where stages 1-2 hold every layer's. The optimizer's state is the
// partition's at all three.
TEST_CASE("device step: at stages 2 and 3 the device keeps the partition's gradients and parameters") {
  on_deep_mlp([](ProcessGroup& group, backend::Cuda& cuda, Plugin& plugin, auto& nccl, const DsConfig& config) {
    uint64_t sent = 0;  // by the device group in the last step
    auto device_memory = [&](int stage, size_t& psi, size_t& partition, size_t& largest_unit,
                             amp::Storage precision = amp::Storage::F32) {
      EngineConfig e = units_per_layer(cuda, stage, &nccl);
      e.precision = precision;
      Engine engine = make_engine(e, plugin, group, config);
      REQUIRE(engine.optimizer_place().find("on the device") != std::string::npos);
      engine.step();
      const uint64_t before = nccl.comms().sent_bytes();
      engine.step();
      sent = nccl.comms().sent_bytes() - before;
      psi = engine.gather_parameters().size();
      partition = engine.layout().partition_size();
      largest_unit = 0;
      for (const zero::Unit& u : engine.layout().units()) largest_unit = std::max(largest_unit, u.size);
      CHECK(engine.memory().grads == 0);  // (nor the host)
      return *engine.device_memory();
    };
    size_t psi = 0, partition = 0, largest = 0;
    const MemoryReport one = device_memory(1, psi, partition, largest);
    const MemoryReport two = device_memory(2, psi, partition, largest);
    CHECK(largest * 4 < psi);  // (several units, or there is nothing to save)
    CHECK(one.grads >= psi * sizeof(float));
    CHECK(two.grads >= partition * sizeof(float));
    CHECK(two.grads <= (partition + largest + 8) * sizeof(float));  // (+ each tensor's alignment to 16 bytes)
    CHECK(one.optimizer_state == 2 * partition * sizeof(float));    // Adam's two moments, fp32, partitioned
    CHECK(two.optimizer_state == one.optimizer_state);
    CHECK(two.params == one.params);
    CHECK(one.params >= psi * sizeof(float));
    const MemoryReport three = device_memory(3, psi, partition, largest);
    CHECK(three.params >= partition * sizeof(float));
    CHECK(three.params <= (partition + (largest + 1) + 2 * (largest + 8)) * sizeof(float));  // (+ alignment)
    CHECK(three.params < two.params);
    CHECK(three.grads == two.grads);
    CHECK(three.optimizer_state == one.optimizer_state);
    // In bf16 the partition and the gathers hold 16 bits, as the host's and DeepSpeed's do (the views the layers
    // read are fp32); the master is fp32 beside the optimizer state.
    const uint64_t sent_fp32 = sent;
    const MemoryReport bf16 = device_memory(3, psi, partition, largest, amp::Storage::BF16);
    CHECK(bf16.params >= partition * sizeof(uint16_t) + 2 * largest * sizeof(float));
    CHECK(bf16.params <= (partition + (largest + 1)) * sizeof(uint16_t) + 2 * (largest + 8) * sizeof(float));
    CHECK(bf16.optimizer_state == 3 * partition * sizeof(float));  // the master and Adam's two moments
    CHECK(sent < sent_fp32);  // the gradients' reduce-scatters are fp32 in both: the gathers' bytes halved
    CHECK(sent > sent_fp32 / 2);
  });
}

TEST_CASE("device step: a device group of another size than the ranks' is refused when the engine is made") {
  const DsConfig config = adam_config(2);
  run_ranks(2, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
    backend::Cuda cuda(0);
    auto plugin = Plugin::load(plugin_path(), kModel, cuda.table());
    auto alone = make_nccl_group(fake_nccl_api(), store, 0, 1, "alone-" + std::to_string(group.rank()),
                                 std::chrono::seconds(30), group.rank());
    EngineConfig e = on(cuda, true);
    e.device_group = alone.get();
    CHECK_THROWS_WITH_AS(make_engine(e, *plugin, group, config),
                         "engine: the device group and the data-parallel group differ in size", std::invalid_argument);
  });
}
#endif

TEST_CASE("device step: where it cannot, the optimizer stays on the host and the engine says why") {
  const DsConfig config = adam_config(2);
  run_ranks(2, [&](ProcessGroup& group) {
    backend::Cuda cuda(0);
    auto plugin = Plugin::load(plugin_path(), kModel, cuda.table());
    Engine two_ranks = make_engine(on(cuda, true), *plugin, group, config);
    CHECK(two_ranks.optimizer_place().find("on the CPU") != std::string::npos);
    CHECK(two_ranks.optimizer_place().find("several ranks") != std::string::npos);
  });
  run_ranks(1, [&](ProcessGroup& group) {
    backend::Cuda cuda(0);
    auto plugin = Plugin::load(plugin_path(), kModel, cuda.table());
    EngineConfig e = on(cuda, true);
    e.zero_stage = 3;
    e.params_on_host = true;  // offload_param
    CHECK(make_engine(e, *plugin, group, adam_config(1)).optimizer_place().find("offload_param") != std::string::npos);
    e.params_on_host = false;
    CHECK(make_engine(e, *plugin, group, adam_config(1)).optimizer_place().find("gathered there") != std::string::npos);
    e.zero_stage = 0;
    e.optimizer_on_device = false;  // offload_optimizer: the user's choice, no reason given
    CHECK(make_engine(e, *plugin, group, adam_config(1)).optimizer_place().find(':') == std::string::npos);
  });
}
