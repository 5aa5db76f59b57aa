// Shared by the engine tests: training the `mlp` plugin on N thread ranks (real Gloo over loopback)
// with a given optimizer, batch, stage and precision, checking that every rank holds the same
// parameters after every step.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/process_group.h"
#include "comm/thread_ranks.h"
#include "config/ds_config.h"
#include "engine/engine.h"

namespace ds::test {

inline const char* kModel = R"({"in_features": 12, "hidden": 24, "classes": 5, "num_samples": 256})";
inline const std::string kAdam = R"({"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}})";
inline const std::string kSgd = R"({"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}})";
inline const std::string kLamb = R"({"type": "Lamb", "params": {"lr": 0.01, "weight_decay": 0.01}})";
inline const std::string kAdagrad =
    R"({"type": "Adagrad", "params": {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.01, "initial_accumulator_value": 0.1}})";
inline const std::string kRmsprop =  // plain: one state, which the device steps
    R"({"type": "RMSprop", "params": {"lr": 0.01, "alpha": 0.9, "weight_decay": 0.01}})";
inline const std::string kRmspropFull =  // momentum and centered: three states, on the host
    R"({"type": "RMSprop", "params": {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "centered": true, "weight_decay": 0.01}})";
inline const std::string kLion = R"({"type": "Lion", "params": {"lr": 0.002, "weight_decay": 0.01}})";
inline const std::string kMuon =
    R"({"type": "Muon", "params": {"lr": 0.02, "adam_lr": 0.005, "weight_decay": 0.01, "momentum": 0.9}})";

inline std::string plugin_path() { return std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so"; }

// An engine with the config's optimizer and LR schedule.
// Wraps the optimizer the config makes (a test's instrumented stand-in), or nullptr for none.
using OptimizerWrap = std::function<std::unique_ptr<Optimizer>(std::unique_ptr<Optimizer>)>;

inline Engine make_engine(const EngineConfig& e, Plugin& plugin, ProcessGroup& group, const DsConfig& config,
                          const OptimizerWrap& wrap = nullptr) {
  return Engine(e, plugin, group,
                [&](size_t n, NormReducer r) {
                  auto made = make_optimizer(config.optimizer, n, r, &group);
                  return wrap ? wrap(std::move(made)) : std::move(made);
                },
                make_lr_schedule(config.scheduler, config.optimizer.lr));
}

// The plugin's own samples as a Dataset (for evaluate()).
class PluginSamples : public Dataset {
 public:
  explicit PluginSamples(Plugin& plugin) : plugin_(plugin) {}
  ds_dataset_info info() const override { return plugin_.dataset_info(); }
  void get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) override {
    plugin_.get_batch(indices, n, input, target);
  }

 private:
  Plugin& plugin_;
};

struct Run {
  std::vector<float> initial;    // rank 0's fp32 parameters before the first step
  std::vector<float> params;     // rank 0's fp32 parameters at the end
  std::vector<StepStats> steps;  // rank 0's, one per step
  std::string optimizer_place;   // Engine::optimizer_place()
  std::optional<MemoryReport> device_memory;  // rank 0's Engine::device_memory() at the end
};

struct RunSpec {
  int world = 1, micro = 4, gas = 1, steps = 20, stage = 0;
  double clip = 0.0;
  std::string optimizer = kAdam;
  std::string model = kModel;
  bool every_step = false;  // compare the ranks' parameters after every step, not only at the end
  std::function<void(EngineConfig&)> tweak;
  OptimizerWrap wrap_optimizer;
  // Each rank's layers on this device's backend (made per rank; nullptr: the CPU).
  std::function<std::unique_ptr<backend::Device>()> device;
  // With a device: the ranks' group over its memory (EngineConfig::device_group), made per rank.
  std::function<std::unique_ptr<ProcessGroup>(std::shared_ptr<Store> store, int rank, int size)> device_group;
};

inline Run run_training(const RunSpec& spec) {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", spec.micro},
                        {"gradient_accumulation_steps", spec.gas},
                        {"gradient_clipping", spec.clip},
                        {"optimizer", nlohmann::json::parse(spec.optimizer)},
                        {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 0.01}, {"warmup_num_steps", 5}}}}}};
  DsConfig config = parse_config(cfg, "test", spec.world);
  std::vector<std::vector<std::vector<float>>> params(spec.world);  // [rank][check]
  Run run;
  std::mutex mutex;
  run_ranks(spec.world, [&](ProcessGroup& group, std::shared_ptr<Store> store) {
    const std::unique_ptr<backend::Device> device = spec.device ? spec.device() : nullptr;
    const std::unique_ptr<ProcessGroup> device_group =
        spec.device_group ? spec.device_group(store, group.rank(), group.size()) : nullptr;
    auto plugin = Plugin::load(plugin_path(), spec.model, device ? device->table() : nullptr);
    EngineConfig e;
    e.device = device.get();
    e.device_group = device_group.get();
    e.micro_batch = config.train_micro_batch_size_per_gpu;
    e.grad_accum = config.gradient_accumulation_steps;
    e.gradient_clipping = config.gradient_clipping;
    e.reduce_bucket_elems = 100;  // several buckets, launched during backward
    e.seed = 7;
    e.zero_stage = spec.stage;
    if (spec.tweak) spec.tweak(e);
    Engine engine = make_engine(e, *plugin, group, config, spec.wrap_optimizer);
    std::vector<std::vector<float>> mine;
    std::vector<StepStats> stats;
    std::vector<float> initial = engine.gather_parameters();
    for (int s = 0; s < spec.steps; ++s) {
      stats.push_back(engine.step());
      if (spec.every_step || s + 1 == spec.steps) mine.push_back(engine.gather_parameters());  // a collective
    }
    std::lock_guard lock(mutex);
    params[group.rank()] = std::move(mine);
    if (group.rank() != 0) return;
    run.steps = std::move(stats);
    run.initial = std::move(initial);
    run.optimizer_place = engine.optimizer_place();
    run.device_memory = engine.device_memory();
  });
  for (int r = 1; r < spec.world; ++r) REQUIRE(params[r] == params[0]);  // replicas never drift apart
  run.params = params[0].back();
  return run;
}

// Parameters after `steps` optimizer steps on `world` ranks (rank 0's copy; all ranks are checked equal).
inline std::vector<float> train(int world, int micro, int gas, double clip, const std::string& optimizer, int steps,
                                int stage = 0, const std::function<void(EngineConfig&)>& tweak = {}) {
  RunSpec spec;
  spec.world = world;
  spec.micro = micro;
  spec.gas = gas;
  spec.clip = clip;
  spec.optimizer = optimizer;
  spec.steps = steps;
  spec.stage = stage;
  spec.tweak = tweak;
  return run_training(spec).params;
}

// ‖a − b‖
inline double distance(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(sum);
}

// ‖a − b‖ / ‖b‖
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  return distance(a, b) / distance(b, std::vector<float>(b.size(), 0.0f));
}

// An engine built with a setting off or on (say, state in a swap file), handed to `body`.
using WithEngine = std::function<void(bool on, const std::function<void(Engine&)>& body)>;

// Checkpoints move between the two settings: 6 steps straight (setting off) give the same parameters
// as 3 steps, a checkpoint, and 3 more in a fresh engine, for saved/loaded with the setting on/on,
// on/off and off/on.
inline void check_checkpoints_cross(const WithEngine& with_engine) {
  std::vector<float> straight;
  with_engine(false, [&](Engine& engine) {
    for (int s = 0; s < 6; ++s) engine.step();
    straight = engine.gather_parameters();
  });
  for (auto [save_on, load_on] : {std::pair{true, true}, {true, false}, {false, true}}) {
    CAPTURE(save_on);
    CAPTURE(load_on);
    TrainingState saved;
    with_engine(save_on, [&](Engine& engine) {
      for (int s = 0; s < 3; ++s) engine.step();
      saved = engine.checkpoint_shard();
    });
    std::vector<float> resumed;
    with_engine(load_on, [&](Engine& engine) {
      engine.restore(saved);
      for (int s = 0; s < 3; ++s) engine.step();
      resumed = engine.gather_parameters();
    });
    CHECK(resumed == straight);
  }
}

}  // namespace ds::test
