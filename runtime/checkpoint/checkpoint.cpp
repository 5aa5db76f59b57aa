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

std::string model_file(const std::string& dir, const std::string& tag) { return dir + "/" + tag + "/model_states.dsckpt"; }
std::string rank_file(const std::string& dir, const std::string& tag, int rank) {
  return fmt::format("{}/{}/rank_{:05}_optim_states.dsckpt", dir, tag, rank);
}

nlohmann::json param_list(const Engine& engine) {
  nlohmann::json params = nlohmann::json::array();
  for (const ParamSlot& slot : engine.slots()) {
    if (slot.owner >= 0) continue;  // tied: stored once, as its owner
    params.push_back({{"name", slot.name},
                      {"shape", std::vector<int64_t>(slot.shape.dims, slot.shape.dims + slot.shape.ndim)}});
  }
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
  if (!runs.empty()) {
    CheckpointFile file;
    nlohmann::json run_list = nlohmann::json::array();
    for (const OwnedRun& r : runs) run_list.push_back({r.global, r.size});
    file.header = {{"kind", "optim_states"}, {"rank", group.rank()}, {"world_size", group.size()}, {"runs", run_list}};
    file.tensors = std::move(shard.tensors);
    write_checkpoint_file(rank_file(dir, tag, group.rank()), file);
  }
  // Which ranks wrote a file: every rank when partitioned, else rank 0 alone.
  const int writers = engine.layout().world() > 1 ? group.size() : 1;
  if (group.rank() == 0) {
    CheckpointFile model;
    model.header = {{"kind", "model_states"},
                    {"tag", tag},
                    {"world_size", group.size()},
                    {"zero_stage", engine.zero_stage()},
                    {"precision", precision_name(engine.precision())},
                    {"steps", shard.steps},
                    {"updates", shard.updates},
                    {"writers", writers},
                    {"num_params", engine.num_parameters()},
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
  group.barrier();  // every rank's files are durable before `latest` names them
  if (group.rank() == 0) {
    write_text_atomically(dir + "/latest", tag + "\n");
    if (keep_last > 0) prune(dir, keep_last);
  }
  return tag;
}

std::optional<std::string> latest_tag(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  if (!in) return std::nullopt;
  std::string tag;
  std::getline(in, tag);
  if (tag.empty() || tag.find('/') != std::string::npos || tag == "." || tag == "..")
    throw CheckpointError(fmt::format("{}/latest: '{}' is not a checkpoint tag", dir, tag));
  return tag;
}

LoadedCheckpoint read_checkpoint(const std::string& dir, const std::string& tag) {
  const std::string model_path = model_file(dir, tag);
  LoadedCheckpoint out;
  out.model = read_checkpoint_file(model_path).header;
  TrainingState& state = out.state;
  int writers = 0;
  size_t psi = 0;
  try {
    const nlohmann::json& h = out.model;
    if (h.at("kind") != "model_states") throw CheckpointError(fmt::format("{}: not a model_states file", model_path));
    state.steps = h.at("steps").get<int64_t>();
    state.updates = h.at("updates").get<int64_t>();
    writers = h.at("writers").get<int>();
    psi = h.at("num_params").get<size_t>();
    if (h.contains("loss_scaler")) {
      const nlohmann::json& s = h["loss_scaler"];
      state.scaler = amp::LossScaler::State{s.at("scale").get<double>(), s.at("iteration").get<int64_t>(),
                                            s.at("last_overflow").get<int64_t>(), s.at("hysteresis_left").get<int64_t>()};
    }
    if (h.contains("optimizer_scalars"))
      for (const auto& entry : h["optimizer_scalars"])
        state.scalars.emplace_back(entry.at("name").get<std::string>(), entry.at("values").get<std::vector<double>>());
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("{}: malformed header: {}", model_path, e.what()));
  }

  std::vector<uint8_t> covered(psi, 0);
  for (int r = 0; r < writers; ++r) {
    const std::string path = rank_file(dir, tag, r);
    CheckpointFile file = read_checkpoint_file(path);
    try {
      if (state.tensors.empty())
        for (const auto& entry : file.tensors) state.tensors.emplace_back(entry.first, std::vector<float>(psi));
      if (file.tensors.size() != state.tensors.size())
        throw CheckpointError(fmt::format("{}: {} tensors where rank 0's file has {}", path, file.tensors.size(),
                                          state.tensors.size()));
      size_t at = 0;  // position in this file's tensors
      for (const auto& run : file.header.at("runs")) {
        const size_t global = run.at(0).get<size_t>(), size = run.at(1).get<size_t>();
        if (global > psi || size > psi - global)
          throw CheckpointError(fmt::format("{}: elements [{}, {}) are outside the model's {}", path, global,
                                            global + size, psi));
        for (size_t t = 0; t < file.tensors.size(); ++t) {
          if (file.tensors[t].second.size() < at + size)
            throw CheckpointError(fmt::format("{}: tensor {} is shorter than its runs", path, file.tensors[t].first));
          std::copy_n(file.tensors[t].second.begin() + static_cast<std::ptrdiff_t>(at), size,
                      state.tensors[t].second.begin() + static_cast<std::ptrdiff_t>(global));
        }
        for (size_t k = global; k < global + size; ++k) ++covered[k];
        at += size;
      }
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError(fmt::format("{}: malformed header: {}", path, e.what()));
    }
  }
  const auto missing = std::count(covered.begin(), covered.end(), 0);
  if (missing > 0 || std::any_of(covered.begin(), covered.end(), [](uint8_t c) { return c > 1; }))
    throw CheckpointError(fmt::format("{}/{}: the rank files do not hold every parameter exactly once ({} missing)",
                                      dir, tag, missing));
  return out;
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
