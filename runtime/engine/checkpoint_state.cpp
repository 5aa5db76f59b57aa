// The engine's side of checkpoints: its state in the canonical flat order, and restoring it from
// the whole state whatever world size or ZeRO stage wrote it (see TrainingState in engine.h).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "engine/engine.h"

namespace ds {

std::vector<OwnedRun> Engine::checkpoint_runs() const {
  std::vector<OwnedRun> runs;
  if (layout_->world() == 1 && group_.rank() != 0) return runs;  // unpartitioned: rank 0 writes it all
  const size_t r = static_cast<size_t>(layout_->rank());
  size_t global = 0;  // where the unit starts in the flat order
  for (const zero::Unit& u : layout_->units()) {
    const size_t first = std::min(r * u.chunk, u.size), end = std::min(first + u.chunk, u.size);
    if (end > first) runs.push_back(OwnedRun{global + first, u.part_offset, end - first});
    global += u.size;
  }
  return runs;
}

// The partition's master copy and state in fp32 (read from the swap file with NVMe offload: a
// checkpoint passes through memory whole), restricted to the runs this rank writes.
TrainingState Engine::checkpoint_shard() {
  TrainingState s;
  s.steps = steps_;
  s.updates = updates_;
  if (scaler_) s.scaler = scaler_->state();
  const std::vector<OwnedRun> runs = checkpoint_runs();
  std::vector<float> master_p;
  std::vector<std::vector<float>> state_p;
  read_partition(master_p, &state_p);
  auto in_runs = [&](const std::vector<float>& partition) {
    std::vector<float> values;
    for (const OwnedRun& run : runs)
      values.insert(values.end(), partition.begin() + static_cast<std::ptrdiff_t>(run.part),
                    partition.begin() + static_cast<std::ptrdiff_t>(run.part + run.size));
    return values;
  };
  s.tensors.emplace_back("master", in_runs(master_p));
  const std::vector<StateView> own = optimizer_->state();
  for (size_t k = 0; k < own.size(); ++k) s.tensors.emplace_back(own[k].name, in_runs(state_p[k]));
  for (const auto& [name, values] : optimizer_->scalar_state()) s.scalars.emplace_back(name, *values);
  return s;
}

void Engine::restore(const TrainingState& state) {
  auto optimizer_state = optimizer_->state();
  std::vector<std::string> want{"master"}, have;
  for (const StateView& entry : optimizer_state) want.push_back(entry.name);
  for (const auto& entry : state.tensors) have.push_back(entry.first);
  if (want != have)
    throw ConfigError(fmt::format("checkpoint: it holds {}, but this run's optimizer needs {} (a different optimizer "
                                  "type?)", fmt::join(have, ", "), fmt::join(want, ", ")));
  for (const auto& [name, values] : state.tensors)
    if (values.size() != num_params_)
      throw ConfigError(fmt::format("checkpoint: {} has {} elements, but the model has {} parameters", name,
                                    values.size(), num_params_));
  auto scalars = optimizer_->scalar_state();
  std::vector<std::string> want_scalars, have_scalars;
  for (const auto& entry : scalars) want_scalars.push_back(entry.first);
  for (const auto& entry : state.scalars) have_scalars.push_back(entry.first);
  if (want_scalars != have_scalars)
    throw ConfigError(fmt::format("checkpoint: it holds per-tensor values [{}], but this run's optimizer needs [{}] "
                                  "(a different optimizer type?)", fmt::join(have_scalars, ", "),
                                  fmt::join(want_scalars, ", ")));
  if (state.scaler.has_value() != scaler_.has_value())
    throw ConfigError(fmt::format("checkpoint: saved {} loss scaling, but this run has {}",
                                  state.scaler ? "with" : "without", scaler_ ? "fp16 loss scaling" : "none"));

  const size_t r = static_cast<size_t>(layout_->rank());
  const std::vector<float>& full = state.tensors[0].second;  // master, flat order
  const size_t partition = layout_->partition_size();
  std::vector<float> master_p(partition, 0.0f), rounded;  // padding stays zero
  std::vector<std::vector<float>> state_p(optimizer_state.size(), std::vector<float>(partition, 0.0f));
  size_t global = 0;
  for (const zero::Unit& u : layout_->units()) {
    const size_t first = std::min(r * u.chunk, u.size), end = std::min(first + u.chunk, u.size);
    auto take_chunk = [&](const std::vector<float>& values, std::vector<float>& into) {  // this rank's chunk
      std::copy(values.begin() + static_cast<std::ptrdiff_t>(global + first),
                values.begin() + static_cast<std::ptrdiff_t>(global + end),
                into.begin() + static_cast<std::ptrdiff_t>(u.part_offset));
    };
    take_chunk(full, master_p);
    for (size_t k = 0; k < optimizer_state.size(); ++k) take_chunk(state.tensors[k + 1].second, state_p[k]);
    if (!policy_.parameters) {  // the whole unit, from the full state: no gather needed
      rounded.assign(u.padded(), 0.0f);
      std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(global), u.size, rounded.begin());
      amp::from_float(config_.precision, rounded.data(), params_.data() + u.begin * elem_, u.padded());
    }
    global += u.size;
  }
  if (fetcher_) fetcher_->discard_reads();  // read ahead before the values change
  store_partition(master_p, state_p);
  steps_ = state.steps;
  updates_ = state.updates;
  if (scaler_) scaler_->restore(*state.scaler);
  for (size_t k = 0; k < scalars.size(); ++k) *scalars[k].second = state.scalars[k].second;
  optimizer_->restored();
  if (fetcher_) fetcher_->end_step();
}

}  // namespace ds
