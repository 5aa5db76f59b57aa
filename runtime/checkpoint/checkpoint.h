// Saving and loading training checkpoints (README.md in this folder). Layout, like DeepSpeed's:
//   DIR/<tag>/model_states.dsckpt        rank 0: the run's shape (parameters, world size, stage,
//                                        precision), step counters, loss scaler and the optimizer's
//                                        per-tensor numbers (1-bit LAMB's)
//   DIR/<tag>/rank_<r>_optim_states.dsckpt  each writing rank: its partition of the fp32 master
//                                        weights and of every optimizer state buffer
//   DIR/latest                           the newest complete tag, e.g. "global_step200"
// `latest` changes only after every rank has written its files, so a crash at any moment leaves
// the previous checkpoint loadable. Loading assembles the whole state from every rank's file, so a
// checkpoint loads at any world size and ZeRO stage.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "checkpoint/format.h"
#include "comm/process_group.h"
#include "engine/engine.h"

namespace ds::ckpt {

// "global_step<N>" for N optimizer steps taken.
std::string tag_for_step(int64_t steps);

// Writes the engine's state as DIR/<tag> (every rank calls it: a collective), then points
// DIR/latest at it and deletes older global_step* tags beyond the newest `keep_last` (0: keep all).
// `run` (e.g. the model name and its config) is stored in model_states for inspection. Returns the tag.
std::string save_checkpoint(Engine& engine, ProcessGroup& group, const std::string& dir, int64_t keep_last,
                            const nlohmann::json& run);

// DIR/<tag>/model_states.dsckpt and DIR/<tag>/rank_<r, 5 digits>_optim_states.dsckpt.
std::string model_file(const std::string& dir, const std::string& tag);
std::string rank_file(const std::string& dir, const std::string& tag, int rank);

// The tag DIR/latest names, or nothing when there is no DIR/latest.
std::optional<std::string> latest_tag(const std::string& dir);

// A whole checkpoint: model_states' header (params, world size, stage, …) and the full state, every
// tensor with all Ψ elements in the canonical flat order.
struct LoadedCheckpoint {
  nlohmann::json model;  // model_states' header
  TrainingState state;
};

// Reads and checks DIR/<tag> (every file's checksums, every element covered exactly once). Throws
// CheckpointError naming the file and the problem.
LoadedCheckpoint read_checkpoint(const std::string& dir, const std::string& tag);

// Restores the engine from DIR/<tag>, whatever world size or stage saved it (a collective at stage
// 3). Throws CheckpointError naming the file and the problem (missing, corrupt, truncated, another
// format version, other parameter names or shapes).
void load_checkpoint(Engine& engine, const std::string& dir, const std::string& tag);

}  // namespace ds::ckpt
