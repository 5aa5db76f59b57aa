// Checkpoint save and load (see checkpoint.h).
#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "amp/storage.h"

namespace fs = std::filesystem;

namespace ds::ckpt {
namespace {

const char* precision_name(amp::Storage s) {
  return s == amp::Storage::F16 ? "fp16" : s == amp::Storage::BF16 ? "bf16" : "fp32";
}

nlohmann::json param_list(const Engine& engine) {
  nlohmann::json params = nlohmann::json::array();
  for (const ModelTensor& t : engine.model_tensors())  // tied ones once, as their owner
    params.push_back({{"name", t.name}, {"shape", std::vector<int64_t>(t.shape.dims, t.shape.dims + t.shape.ndim)}});
  return params;
}

// Deletes global_step<N> tags other than the newest keep_last (by N).
void prune(const std::string& dir, int64_t keep_last) {
  static const std::regex pattern("global_step([0-9]+)");
  std::vector<std::pair<int64_t, fs::path>> tags;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, m, pattern)) tags.emplace_back(std::stoll(m[1]), entry.path());
  }
  std::sort(tags.rbegin(), tags.rend());
  for (size_t i = static_cast<size_t>(keep_last); i < tags.size(); ++i) fs::remove_all(tags[i].second);
}

}  // namespace

std::string tag_for_step(int64_t steps) { return fmt::format("global_step{}", steps); }

std::string save_checkpoint(Engine& engine, ProcessGroup& group, const std::string& dir, int64_t keep_last,
                            const nlohmann::json& run) {
  const std::string tag = tag_for_step(engine.steps_taken());
  std::error_code error;
  fs::create_directories(dir + "/" + tag, error);
  if (error) throw CheckpointError(fmt::format("{}/{}: cannot create: {}", dir, tag, error.message()));

  const std::vector<OwnedRun> runs = engine.checkpoint_runs();
  TrainingState shard = engine.checkpoint_shard();
  const int writer = engine.checkpoint_writer();
  if (writer >= 0) {
    CheckpointFile file;
    nlohmann::json run_list = nlohmann::json::array();
    for (const OwnedRun& r : runs) run_list.push_back({r.global, r.size});
    file.header = {{"kind", "optim_states"}, {"rank", writer}, {"world_size", group.size() * engine.pipeline_stages() * engine.tensor_parallel_size()},
                   {"runs", run_list}};
    file.tensors = std::move(shard.tensors);
    write_checkpoint_file(rank_file(dir, tag, writer), file);
  }
  // Which ranks wrote a file: every rank when partitioned, else data-parallel rank 0 (of each stage).
  const int writers = engine.checkpoint_writers();
  const int stages = engine.pipeline_stages();
  if (writer == 0) {
    CheckpointFile model;
    model.header = {{"kind", "model_states"},
                    {"tag", tag},
                    {"world_size", group.size() * stages * engine.tensor_parallel_size()},
                    {"pipeline_stages", stages},
                    {"tensor_parallel_size", engine.tensor_parallel_size()},
                    {"zero_stage", engine.zero_stage()},
                    {"precision", precision_name(engine.precision())},
                    {"steps", shard.steps},
                    {"updates", shard.updates},
                    {"writers", writers},
                    {"num_params", engine.model_parameters()},
                    {"params", param_list(engine)},
                    {"run", run}};
    if (shard.scaler)
      model.header["loss_scaler"] = {{"scale", shard.scaler->scale}, {"iteration", shard.scaler->iteration},
                                     {"last_overflow", shard.scaler->last_overflow},
                                     {"hysteresis_left", shard.scaler->hysteresis_left}};
    if (!shard.scalars.empty()) {
      nlohmann::json scalars = nlohmann::json::array();
      for (const auto& [name, values] : shard.scalars) scalars.push_back({{"name", name}, {"values", values}});
      model.header["optimizer_scalars"] = scalars;
    }
    write_checkpoint_file(model_file(dir, tag), model);
  }
  engine.barrier();  // every rank's files are durable before `latest` names them
  if (writer == 0) {
    write_text_atomically(dir + "/latest", tag + "\n");
    if (keep_last > 0) prune(dir, keep_last);
  }
  return tag;
}

void load_checkpoint(Engine& engine, const std::string& dir, const std::string& tag) {
  const LoadedCheckpoint loaded = read_checkpoint(dir, tag);
  const nlohmann::json want = param_list(engine);
  const nlohmann::json& have = loaded.model.at("params");
  for (size_t i = 0; i < std::max(want.size(), have.size()); ++i) {
    if (i < want.size() && i < have.size() && want[i] == have[i]) continue;
    auto show = [](const nlohmann::json& list, size_t k) {
      return k < list.size() ? fmt::format("{} {}", list[k]["name"].get<std::string>(), list[k]["shape"].dump())
                             : std::string("nothing");
    };
    throw CheckpointError(fmt::format("{}: parameter {} is {} in the checkpoint but {} in this model (another "
                                      "model config?)", model_file(dir, tag), i, show(have, i), show(want, i)));
  }
  const TrainingState& state = loaded.state;
  try {
    engine.restore(state);
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}/{}: {}", dir, tag, e.what()));
  }
}

}  // namespace ds::ckpt
