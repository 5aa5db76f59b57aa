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

TrainingState Engine::checkpoint_shard() {
  TrainingState s;
  s.steps = steps_;
  s.updates = updates_;
  if (scaler_) s.scaler = scaler_->state();
  const std::vector<OwnedRun> runs = checkpoint_runs();
  std::vector<float> master_values;
  for (const zero::Unit& u : layout_->units()) {
    for (const OwnedRun& run : runs) {
      if (run.part != u.part_offset || u.chunk == 0) continue;
      master_values.resize(master_values.size() + run.size);
      amp::to_float(master_storage(), master(u), master_values.data() + master_values.size() - run.size, run.size);
    }
  }
  s.tensors.emplace_back("master", std::move(master_values));
  for (const StateView& buffer : optimizer_->state()) {
    std::vector<float> values;
    const size_t bytes = amp::storage_bytes(buffer.storage);
    for (const OwnedRun& run : runs) {
      values.resize(values.size() + run.size);
      amp::to_float(buffer.storage, static_cast<const std::byte*>(buffer.data) + run.part * bytes,
                    values.data() + values.size() - run.size, run.size);
    }
    s.tensors.emplace_back(buffer.name, std::move(values));
  }
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
  std::vector<float> rounded, chunk;
  size_t global = 0;
  for (const zero::Unit& u : layout_->units()) {
    const size_t first = std::min(r * u.chunk, u.size), end = std::min(first + u.chunk, u.size);
    auto fill_chunk = [&](const std::vector<float>& values) {  // this rank's chunk of `values`; padding zero
      chunk.assign(u.chunk, 0.0f);
      std::copy(values.begin() + static_cast<std::ptrdiff_t>(global + first),
                values.begin() + static_cast<std::ptrdiff_t>(global + end), chunk.begin());
      return chunk.data();
    };
    if (u.chunk > 0) {
      for (size_t k = 0; k < optimizer_state.size(); ++k) {
        const StateView& buffer = optimizer_state[k];
        amp::from_float(buffer.storage, fill_chunk(state.tensors[k + 1].second),
                        static_cast<std::byte*>(buffer.data) + u.part_offset * amp::storage_bytes(buffer.storage),
                        u.chunk);
      }
      if (config_.precision != amp::Storage::F32 || config_.zero_stage == 3) {
        // fp32 at stage 3, or bf16 master weights: master(u) is the owned parameter chunk itself
        const float* values = fill_chunk(full);
        amp::from_float(master_storage(), values, master(u), u.chunk);
        if (master(u) != owned_params(u)) amp::from_float(config_.precision, values, owned_params(u), u.chunk);
      }
    }
    if (config_.zero_stage < 3) {  // the whole unit, from the full state: no gather needed
      rounded.assign(u.padded(), 0.0f);
      std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(global), u.size, rounded.begin());
      amp::from_float(config_.precision, rounded.data(), params_.data() + u.begin * elem_, u.padded());
    }
    global += u.size;
  }
  steps_ = state.steps;
  updates_ = state.updates;
  if (scaler_) scaler_->restore(*state.scaler);
  for (size_t k = 0; k < scalars.size(); ++k) *scalars[k].second = state.scalars[k].second;
  optimizer_->restored();
  if (fetcher_) fetcher_->end_step();
}

}  // namespace ds
