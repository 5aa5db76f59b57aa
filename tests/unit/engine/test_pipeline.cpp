// Pipeline parallelism changes nothing but where the layers run: a GPT (tied embedding and head) on
// P stages x D data-parallel ranks (threads, real Gloo groups between the stages) gives one rank's
// losses, gradient norms and parameters within 1e-5, at ZeRO 0 and 1, with accumulation (the
// micro-batches of the 1F1B schedule), clipping, fewer micro-batches than stages, evaluation and
// prediction; the replica of the tied weight on the last stage stays bitwise its owner. Tensor
// parallelism (the gpt plugin's Megatron split) likewise, alone and with stages and data parallelism;
// and sequence parallelism (DeepSpeed-Ulysses), alone, with ZeRO 1-3 across the data-parallel ranks, in
// the Hugging Face example's T x S x D = 2 x 2 x 2 layout and with stages.
#include <doctest/doctest.h>

#include <map>
#include <tuple>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/thread_ranks.h"
#include "config/ds_config.h"
#include "core/errors.h"
#include "data/token_dataset.h"
#include "engine/engine.h"
#include "pipe/links.h"

using namespace ds;

namespace {

const std::string kGpt = R"({"n_layer": 2, "n_head": 4, "n_embd": 16, "seq_len": 8, "vocab_size": 64})";

// A text with a pattern to learn: a period of 13 tokens.
std::vector<uint16_t> tokens() {
  std::vector<uint16_t> t;
  for (int i = 0; i < 8 * 64 + 1; ++i) t.push_back(static_cast<uint16_t>(i % 13 * 5 % 64));
  return t;
}

struct Spec {
  int pipe = 1, data = 1, tensor = 1, seq = 1, micro = 2, gas = 4, steps = 12, stage = 0;
  double clip = 0.0;
  std::string partition = "uniform";
  nlohmann::json optimizer = {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.01}}}};
};

struct Result {
  std::vector<double> losses, norms;
  std::vector<float> params;           // the model's own parameters in slot order, replicas left out
                                       // (tensor parallelism: tensor-parallel rank 0's shares)
  bool replicated_match = true;        // tensor parallelism: every rank holds the same replicated parameters
  std::vector<double> eval;            // evaluate() after each step
  std::vector<float> predictions;      // predict() on 2 samples after training
  bool replica_matches_owner = true;   // the last stage's copy of the tied weight is the first stage's
};

Result run(const Spec& spec) {
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", spec.micro},
                        {"gradient_accumulation_steps", spec.gas},
                        {"gradient_clipping", spec.clip},
                        {"optimizer", spec.optimizer},
                        {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 0.01}, {"warmup_num_steps", 3}}}}}};
  const DsConfig config = parse_config(cfg, "test", spec.data);
  const pipe::Topology topology{spec.pipe, spec.data, spec.tensor, spec.seq};
  Result result;
  std::map<int, std::vector<float>> stage_params;  // data and tensor rank 0's, per stage
  std::map<int, std::vector<ParamSlot>> stage_slots;
  std::map<std::tuple<int, int, int>, std::vector<float>> replicated;  // (stage, tensor rank, sequence rank):
                                                                        // replicated parameters
  std::vector<std::vector<double>> all_losses;  // every rank's
  std::mutex mutex;
  run_ranks(topology.world(), [&](ProcessGroup& world, std::shared_ptr<Store> store) {
    const pipe::Topology::Coord me = topology.coord(world.rank());
    auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_gpt.so", kGpt, nullptr,
                               ParallelRank{me.model, spec.tensor}, ParallelRank{me.seq, spec.seq});
    TokenDataset data(tokens(), 8, "train");
    std::unique_ptr<pipe::StageLinks> links;
    std::unique_ptr<ProcessGroup> owned_dp, tp, sp;
    ProcessGroup* dp = &world;
    EngineConfig e;
    if (spec.tensor > 1 || spec.seq > 1) {  // dp: the data and sequence coordinates, data-major
      owned_dp = make_gloo_group(store, me.data * spec.seq + me.seq, spec.data * spec.seq,
                                 fmt::format("dp-{}-{}", me.pipe, me.model), std::chrono::seconds(30));
      dp = owned_dp.get();
    }
    if (spec.tensor > 1) {
      tp = make_gloo_group(store, me.model, spec.tensor, fmt::format("tp-{}-{}-{}", me.pipe, me.data, me.seq),
                           std::chrono::seconds(30));
      e.tensor_parallel = tp.get();
    }
    if (spec.seq > 1) {
      sp = make_gloo_group(store, me.seq, spec.seq, fmt::format("sp-{}-{}-{}", me.pipe, me.data, me.model),
                           std::chrono::seconds(30));
      e.sequence_parallel = sp.get();
    }
    if (spec.pipe > 1) {
      links = std::make_unique<pipe::StageLinks>(store, topology, world.rank(), std::chrono::seconds(30));
      if (!owned_dp) {
        owned_dp = make_gloo_group(store, me.data, spec.data, fmt::format("dp-{}", me.pipe), std::chrono::seconds(30));
        dp = owned_dp.get();
      }
      std::vector<std::string> names;
      std::vector<size_t> sizes;
      for (int i = 0; i < plugin->num_layers(); ++i) {
        names.push_back(plugin->layer(i).name);
        size_t n = 0;
        for (const ParamInfo& p : plugin->layer(i).params) n += static_cast<size_t>(p.numel());
        sizes.push_back(n);
      }
      e.pipeline = links.get();
      e.stage_bounds = pipe::partition(spec.partition, spec.pipe, names, sizes);
    }
    e.micro_batch = spec.micro;
    e.grad_accum = spec.gas;
    e.gradient_clipping = spec.clip;
    e.zero_stage = spec.stage;
    e.reduce_bucket_elems = 700;  // several units per stage
    e.allgather_bucket_elems = 700;
    e.seed = 5;
    Engine engine(e, *plugin, *dp,
                  [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r, dp); },
                  make_lr_schedule(config.scheduler, config.optimizer.lr), &data);
    std::vector<double> losses, norms, eval;
    for (int s = 0; s < spec.steps; ++s) {
      const StepStats stats = engine.step();
      losses.push_back(stats.loss);
      norms.push_back(stats.grad_norm);
      eval.push_back(engine.evaluate(data, 16));
    }
    std::vector<float> sample(2 * 8);
    for (size_t k = 0; k < sample.size(); ++k) sample[k] = std::bit_cast<float>(static_cast<int32_t>(k * 7 % 64));
    const std::vector<float> predictions =
        engine.predict(ds_tensor{sample.data(), DS_I32, ds_shape{2, {2, 8}}, DS_DEVICE_CPU});
    std::vector<float> params = engine.gather_parameters();
    std::vector<float> same;  // the replicated parameters, in slot order
    size_t at = 0;
    for (const ParamSlot& slot : engine.slots()) {
      if (slot.owner >= 0) continue;
      if (slot.shard.dim < 0) same.insert(same.end(), params.begin() + static_cast<std::ptrdiff_t>(at),
                                          params.begin() + static_cast<std::ptrdiff_t>(at + slot.size));
      at += slot.size;
    }
    std::lock_guard lock(mutex);
    if (me.data == 0) replicated[{me.pipe, me.model, me.seq}] = std::move(same);
    if (me.data == 0 && me.model == 0 && me.seq == 0) {
      stage_params[me.pipe] = std::move(params);
      stage_slots[me.pipe] = engine.slots();
    }
    if (world.rank() == 0) {
      result.losses = losses;
      result.norms = norms;
      result.eval = eval;
      result.predictions = predictions;
    }
    all_losses.push_back(losses);
  });
  for (const auto& losses : all_losses) CHECK(losses == result.losses);  // every stage prints the same loss
  for (const auto& [where, values] : replicated)
    result.replicated_match &= values == replicated.at({std::get<0>(where), 0, 0});
  std::map<std::string, std::vector<float>> by_name;  // every stage's own tensors, by name
  for (const auto& [stage, slots] : stage_slots) {
    size_t at = 0;
    for (const ParamSlot& slot : slots) {
      if (slot.owner >= 0) continue;
      std::vector<float> values(stage_params[stage].begin() + static_cast<std::ptrdiff_t>(at),
                                stage_params[stage].begin() + static_cast<std::ptrdiff_t>(at + slot.size));
      at += slot.size;
      if (slot.replica) {
        result.replica_matches_owner = result.replica_matches_owner && values == by_name.at("embed.wte");
        continue;
      }
      result.params.insert(result.params.end(), values.begin(), values.end());
      by_name[slot.name] = std::move(values);
    }
  }
  return result;
}

double relative(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1e-12));
  return worst;
}

double relative(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// The same global batch on one rank: micro-batch x accumulation x data-parallel ranks samples per step.
Result single(const Spec& spec) {
  Spec one;
  one.micro = spec.micro * spec.gas * spec.data;
  one.gas = 1;
  one.steps = spec.steps;
  one.clip = spec.clip;
  one.optimizer = spec.optimizer;
  return run(one);
}

void check_same(const Result& pipeline, const Result& one, bool whole_params = true) {
  CHECK(relative(pipeline.losses, one.losses) < 1e-5);
  CHECK(relative(pipeline.norms, one.norms) < 1e-5);
  CHECK(relative(pipeline.eval, one.eval) < 1e-5);
  if (whole_params) CHECK(relative(pipeline.params, one.params) < 1e-5);
  CHECK(pipeline.replicated_match);
  CHECK(relative(pipeline.predictions, one.predictions) < 1e-5);
  CHECK(pipeline.replica_matches_owner);
  CHECK(pipeline.losses.back() < pipeline.losses.front());
}

// pipe x data x tensor x seq ranks at a ZeRO stage, clipping at 0.5, train as one rank does (the whole
// parameters compared where no tensor is split).
void check_layout(int pipe, int data, int tensor, int seq, int stage, int steps) {
  CAPTURE(pipe);
  CAPTURE(data);
  CAPTURE(tensor);
  CAPTURE(seq);
  CAPTURE(stage);
  Spec spec;
  spec.pipe = pipe;
  spec.data = data;
  spec.tensor = tensor;
  spec.seq = seq;
  spec.stage = stage;
  spec.clip = 0.5;
  spec.steps = steps;
  check_same(run(spec), single(spec), /*whole_params=*/tensor == 1);
}

}  // namespace

TEST_CASE("pipeline: 2 and 4 stages give one rank's training") {
  for (int stages : {2, 4}) {
    for (double clip : {0.0, 0.5}) {
      CAPTURE(stages);
      CAPTURE(clip);
      Spec spec;
      spec.pipe = stages;
      spec.clip = clip;
      check_same(run(spec), single(spec));
    }
  }
}

// Muon takes the tied embedding by its owner's name ("embed.wte": Adam) on the stage that keeps a replica of it
// under the head's name, so the two copies step alike (by the head's name the replica stepped by Muon: the losses
// 12% off one rank's). Newton–Schulz multiplies a gradient's smallest directions by up to a⁵ ≈ 490, and the
// rounding differences between the stages' and one rank's gradients with them: the parameters within 1e-3.
TEST_CASE("pipeline: Muon on 2 stages gives one rank's training, the head's replica of the embedding its owner") {
  Spec spec;
  spec.pipe = 2;
  spec.optimizer = {{"type", "Muon"}, {"params", {{"lr", 0.01}, {"adam_lr", 0.005}}}};
  const Result pipeline = run(spec), one = single(spec);
  check_same(pipeline, one, /*whole_params=*/false);
  CHECK(relative(pipeline.params, one.params) < 1e-3);
}

TEST_CASE("pipeline: 2 stages x 2 data-parallel ranks at ZeRO 0 and 1, balanced by parameters") {
  for (int stage : {0, 1}) {
    CAPTURE(stage);
    Spec spec;
    spec.pipe = 2;
    spec.data = 2;
    spec.stage = stage;
    spec.clip = 0.5;
    spec.partition = "parameters";
    check_same(run(spec), single(spec));
  }
}

TEST_CASE("pipeline: fewer micro-batches than stages, and one") {
  for (int gas : {1, 2}) {
    CAPTURE(gas);
    Spec spec;
    spec.pipe = 3;
    spec.gas = gas;
    spec.partition = "type:h";
    check_same(run(spec), single(spec));
  }
}

TEST_CASE("pipeline: ZeRO-2 and 3 are refused, as DeepSpeed refuses them") {
  Spec spec;
  spec.pipe = 2;
  spec.stage = 2;
  spec.steps = 1;
  CHECK_THROWS_WITH(run(spec), doctest::Contains("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"));
}

TEST_CASE("tensor parallelism: 2 ranks, and with 2 stages and 2 data-parallel ranks, give one rank's training") {
  for (auto [pipe, data] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}})
    check_layout(pipe, data, 2, 1, data > 1 ? 1 : 0, 8);
}

TEST_CASE("tensor or sequence parallelism with ZeRO 2 and 3 across the data-parallel ranks") {
  // With sequence parallelism the ZeRO partitions span the data-parallel and sequence-parallel ranks.
  for (auto [stage, tensor, seq] : {std::tuple{2, 2, 1}, std::tuple{3, 2, 1}, std::tuple{2, 1, 2}, std::tuple{3, 1, 2}})
    check_layout(1, 2, tensor, seq, stage, 6);
}

TEST_CASE("sequence parallelism: 2 ranks, with 2 data-parallel ranks, 2 tensor-parallel ranks and 2 stages give one "
          "rank's training") {
  // (pipe, data, tensor, seq, ZeRO stage): the last but one is the Hugging Face example's T x S x D = 2 x 2 x 2.
  for (auto [pipe, data, tensor, seq, stage] : {std::tuple{1, 1, 1, 2, 0}, std::tuple{1, 2, 1, 2, 1},
                                                std::tuple{1, 1, 1, 4, 0}, std::tuple{1, 2, 2, 2, 1},
                                                std::tuple{2, 1, 1, 2, 1}})
    check_layout(pipe, data, tensor, seq, stage, 6);
}
