// An optimizer that does its own communication (the 1-bit family) turns the engine's gradient
// averaging off (Optimizer::wants_averaged_gradients): the engine then hands each rank its own
// gradient (the mean of the ranks' is what an averaging run gets), reports √(Σ‖gᵣ‖²/W) as the norm
// and sends nothing but that sum and the loss; OneBitAdam through the engine keeps the replicas
// identical and turns the all-reduce off after its warm-up; other ZeRO stages are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <mutex>

#include "engine_test_util.h"

using namespace ds;

namespace {

// Records the gradients of every step and changes nothing, so two runs see the same parameters.
class Recorder final : public Optimizer {
 public:
  Recorder(size_t n, int64_t averaged_until) : n_(n), averaged_until_(averaged_until) {}
  void step(std::span<const Segment> segments, const std::vector<TensorRange>&, double, int64_t) override {
    std::vector<float> g;
    for (const Segment& s : segments) {
      const auto* grads = static_cast<const float*>(s.grads);
      g.insert(g.end(), grads, grads + s.size);
    }
    REQUIRE(g.size() == n_);
    grads.push_back(std::move(g));
  }
  std::vector<StateView> state() override { return {}; }
  bool wants_averaged_gradients(int64_t step) const override { return step <= averaged_until_; }
  std::vector<std::vector<float>> grads;  // per step

 private:
  size_t n_;
  int64_t averaged_until_;
};

struct Recorded {
  std::vector<std::vector<std::vector<float>>> grads;  // [rank][step][element]
  std::vector<std::vector<StepStats>> stats;           // [rank][step]
};

Recorded record(int world, int64_t averaged_until, int steps) {
  Recorded out;
  out.grads.resize(world);
  out.stats.resize(world);
  std::mutex mutex;
  run_ranks(world, [&](ProcessGroup& group) {
    auto plugin = Plugin::load(test::plugin_path(), test::kModel);
    EngineConfig e;
    e.micro_batch = 4;
    e.reduce_bucket_elems = 100;
    e.seed = 7;
    Recorder* recorder = nullptr;
    Engine engine(e, *plugin, group,
                  [&](size_t n, NormReducer) {
                    auto r = std::make_unique<Recorder>(n, averaged_until);
                    recorder = r.get();
                    return r;
                  },
                  make_lr_schedule(std::nullopt, 0.01));
    std::vector<StepStats> stats;
    for (int s = 0; s < steps; ++s) stats.push_back(engine.step());
    std::lock_guard lock(mutex);
    out.grads[group.rank()] = recorder->grads;
    out.stats[group.rank()] = stats;
  });
  return out;
}

}  // namespace

TEST_CASE("engine: without averaging each rank updates with its own gradient, whose mean is the averaged one") {
  const int world = 2;
  const Recorded averaged = record(world, 100, 3), own = record(world, 1, 3);
  for (int step = 0; step < 3; ++step) {
    INFO("step ", step + 1);
    const auto& a = averaged.grads[0][step];
    double worst = 0.0, sum_sq = 0.0, mean_sq = 0.0;
    size_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double mean = (double(own.grads[0][step][i]) + own.grads[1][step][i]) / world;
      worst = std::max(worst, std::abs(mean - a[i]) / (std::abs(a[i]) + 1e-6));
      same += own.grads[0][step][i] == own.grads[1][step][i];
      for (int r = 0; r < world; ++r) sum_sq += double(own.grads[r][step][i]) * own.grads[r][step][i];
      mean_sq += double(a[i]) * a[i];
    }
    CHECK(worst < 1e-5);
    CHECK(own.stats[0][step].averaged == (step == 0));
    if (step == 0) {
      CHECK(same == a.size());  // averaged: every rank holds the same
      CHECK(own.stats[0][step].grad_norm == doctest::Approx(std::sqrt(mean_sq)).epsilon(1e-6));
    } else {
      CHECK(same < a.size() / 2);  // each rank's own
      CHECK(own.stats[0][step].grad_norm == doctest::Approx(std::sqrt(sum_sq / world)).epsilon(1e-6));
      CHECK(own.stats[1][step].grad_norm == own.stats[0][step].grad_norm);
      // Nothing but the squared norm's sum and the loss: two 8-byte all-reduces (half sent each way).
      CHECK(own.stats[0][step].sent_bytes == 2 * 8);
      CHECK(averaged.stats[0][step].sent_bytes > 100 * own.stats[0][step].sent_bytes);
    }
  }
}

TEST_CASE("engine: OneBitAdam keeps the replicas identical and turns the all-reduce off after freeze_step") {
  test::RunSpec spec;
  spec.world = 2;
  spec.steps = 10;
  spec.every_step = true;  // run_training checks the ranks' parameters after every step
  spec.clip = 0.5;
  spec.optimizer = R"({"type": "OneBitAdam", "params": {"lr": 0.01, "freeze_step": 4}})";
  const test::Run run = test::run_training(spec);
  for (const StepStats& s : run.steps) CHECK(s.averaged == (s.step <= 4));
  CHECK(run.steps[9].sent_bytes * 4 < run.steps[3].sent_bytes);
  CHECK(run.params != run.initial);
}

TEST_CASE("engine: an optimizer that does not average refuses ZeRO stages 1-3") {
  test::RunSpec spec;
  spec.world = 2;
  spec.steps = 3;
  spec.stage = 1;
  spec.optimizer = R"({"type": "OneBitAdam", "params": {"freeze_step": 1}})";
  CHECK_THROWS_WITH(test::run_training(spec), doctest::Contains("needs ZeRO stage 0"));
}
