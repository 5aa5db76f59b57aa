// Reading a checkpoint back (see checkpoint.h): DIR/latest, and DIR/<tag>'s files assembled into
// the whole training state. Apart from checkpoint.cpp so that dsckpt's fuzz target (tests/fuzz)
// can link the reading without the engine.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "checkpoint/checkpoint.h"

namespace ds::ckpt {

std::string model_file(const std::string& dir, const std::string& tag) { return dir + "/" + tag + "/model_states.dsckpt"; }
std::string rank_file(const std::string& dir, const std::string& tag, int rank) {
  return fmt::format("{}/{}/rank_{:05}_optim_states.dsckpt", dir, tag, rank);
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
    state.steps = as_integer<int64_t>(h.at("steps"));
    state.updates = as_integer<int64_t>(h.at("updates"));
    writers = as_integer<int>(h.at("writers"));
    psi = as_integer<size_t>(h.at("num_params"));
    if (h.contains("loss_scaler")) {
      const nlohmann::json& s = h["loss_scaler"];
      state.scaler = amp::LossScaler::State{s.at("scale").get<double>(), as_integer<int64_t>(s.at("iteration")),
                                            as_integer<int64_t>(s.at("last_overflow")), as_integer<int64_t>(s.at("hysteresis_left"))};
    }
    if (h.contains("optimizer_scalars"))
      for (const auto& entry : h["optimizer_scalars"])
        state.scalars.emplace_back(entry.at("name").get<std::string>(), entry.at("values").get<std::vector<double>>());
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("{}: malformed header: {}", model_path, e.what()));
  }

  // writers and num_params come from the file: check them against the rank files on disk before
  // they size anything (a corrupt num_params must not allocate terabytes).
  if (writers < 1) throw CheckpointError(fmt::format("{}: writers {} is not a number of rank files", model_path, writers));
  uintmax_t rank_bytes = 0;
  for (int r = 0; r < writers; ++r) {
    std::error_code error;
    const std::string path = rank_file(dir, tag, r);
    rank_bytes += std::filesystem::file_size(path, error);
    if (error) throw CheckpointError(fmt::format("{}: cannot open: {}", path, error.message()));
  }
  if (psi > rank_bytes / sizeof(float))
    throw CheckpointError(fmt::format("{}: num_params {} is more than the {} rank files hold ({} bytes)", model_path,
                                      psi, writers, rank_bytes));
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
        const size_t global = as_integer<size_t>(run.at(0)), size = as_integer<size_t>(run.at(1));
        if (global > psi || size > psi - global)
          throw CheckpointError(fmt::format("{}: elements [{}, {}) are outside the model's {}", path, global,
                                            global + size, psi));
        for (size_t t = 0; t < file.tensors.size(); ++t) {
          if (file.tensors[t].second.size() < at + size)
            throw CheckpointError(fmt::format("{}: tensor {} is shorter than its runs", path, file.tensors[t].first));
          std::copy_n(file.tensors[t].second.begin() + static_cast<std::ptrdiff_t>(at), size,
                      state.tensors[t].second.begin() + static_cast<std::ptrdiff_t>(global));
        }
        for (size_t k = global; k < global + size; ++k) covered[k] = std::min(covered[k] + 1, 2);  // 256 would wrap to 0
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

}  // namespace ds::ckpt
