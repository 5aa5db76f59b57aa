// The engine's side of checkpoints: its state in the canonical flat order, and restoring it from
// the whole state whatever world size or ZeRO stage wrote it (see TrainingState in engine.h).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "cpu/convert.h"
#include "engine/engine.h"

namespace ds {
namespace {

// A run of the engine's flat order (its tensors one after another, replicas included) and where it is
// in the whole model's. A whole tensor is one run; a tensor-parallel share one run per piece.
struct Piece {
  size_t local, size, model;
  bool written;  // this rank writes it: not a replica, and a replicated tensor only on tensor-parallel rank 0
};

std::vector<Piece> pieces(const std::vector<ParamSlot>& slots, ParallelRank tp) {
  std::vector<Piece> out;
  size_t local = 0;
  for (const ParamSlot& slot : slots) {
    if (slot.owner >= 0) continue;
    const bool share = slot.shard.dim >= 0 && tp.size > 1;
    if (!share) {
      out.push_back({local, slot.size, slot.global_offset, !slot.replica && tp.rank == 0});
    } else {  // piece `rank` of every block of every outer row (take_share's order)
      size_t outer = 1, inner = 1;
      for (int d = 0; d < slot.shard.dim; ++d) outer *= static_cast<size_t>(slot.shape.dims[d]);
      for (int d = slot.shard.dim + 1; d < slot.shape.ndim; ++d) inner *= static_cast<size_t>(slot.shape.dims[d]);
      const size_t blocks = static_cast<size_t>(slot.shard.blocks);
      const size_t piece = static_cast<size_t>(slot.shape.dims[slot.shard.dim]) / blocks * inner;
      for (size_t k = 0; k < outer * blocks; ++k)
        out.push_back({local + k * piece, piece,
                       slot.global_offset + (k * static_cast<size_t>(tp.size) + static_cast<size_t>(tp.rank)) * piece,
                       !slot.replica});
    }
    local += slot.size;
  }
  return out;
}

}  // namespace

std::vector<OwnedRun> Engine::checkpoint_runs() const {
  std::vector<OwnedRun> runs;
  if (layout_->world() == 1 && group_.rank() != 0) return runs;  // unpartitioned: rank 0 writes it all
  const size_t r = static_cast<size_t>(layout_->rank());
  const std::vector<Piece> tensors = pieces(slots_, plugin_.tensor_parallel());
  size_t local = 0;  // where the unit starts in the engine's flat order
  for (const zero::Unit& u : layout_->units()) {
    const size_t first = std::min(r * u.chunk, u.size), end = std::min(first + u.chunk, u.size);
    for (const Piece& t : tensors) {  // the run in the model's order, without the replicas
      const size_t lo = std::max(local + first, t.local), hi = std::min(local + end, t.local + t.size);
      if (!t.written || hi <= lo) continue;
      const OwnedRun run{t.model + (lo - t.local), u.part_offset + (lo - local - first), hi - lo};
      if (!runs.empty() && runs.back().global + runs.back().size == run.global && runs.back().part + runs.back().size == run.part)
        runs.back().size += run.size;
      else
        runs.push_back(run);
    }
    local += u.size;
  }
  return runs;
}

// Writers are numbered stage-major, then data-parallel rank (when partitioned), then tensor-parallel rank.
int Engine::checkpoint_writer() const {
  const int stage = config_.pipeline ? config_.pipeline->stage() : 0;
  const ParallelRank tp = plugin_.tensor_parallel();
  if (layout_->world() > 1) return (stage * group_.size() + group_.rank()) * tp.size + tp.rank;
  return group_.rank() == 0 ? stage * tp.size + tp.rank : -1;
}

int Engine::checkpoint_writers() const {
  const int stages = config_.pipeline ? config_.pipeline->stages() : 1;
  return (layout_->world() > 1 ? stages * group_.size() : stages) * plugin_.tensor_parallel().size;
}

// Each barrier waits for ranks that have passed the previous ones: after the last, every rank of the job has arrived.
void Engine::barrier() {
  group_.barrier();
  if (config_.tensor_parallel) config_.tensor_parallel->barrier();
  if (config_.pipeline) config_.pipeline->pipe().barrier();
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
  hold_host_state();  // (freed while the device step holds the state: refilled here)
  auto optimizer_state = optimizer_->state();
  std::vector<std::string> want{"master"}, have;
  for (const StateView& entry : optimizer_state) want.push_back(entry.name);
  for (const auto& entry : state.tensors) have.push_back(entry.first);
  if (want != have)
    throw ConfigError(fmt::format("checkpoint: it holds {}, but this run's optimizer needs {} (a different optimizer "
                                  "type?)", fmt::join(have, ", "), fmt::join(want, ", ")));
  for (const auto& [name, values] : state.tensors)
    if (values.size() != model_params_)
      throw ConfigError(fmt::format("checkpoint: {} has {} elements, but the model has {} parameters", name,
                                    values.size(), model_params_));
  if (config_.pipeline && !state.scalars.empty())
    throw ConfigError("checkpoint: per-tensor optimizer values (1-bit LAMB's) with pipeline parallelism");
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

  // With a pipeline or tensor parallelism, this rank's tensors and shares taken out of the whole model's flat
  // order (a replica: its owner's).
  std::vector<std::vector<float>> stage_values;
  const bool split = config_.pipeline || config_.tensor_parallel;
  if (split)
    for (const auto& [name, whole] : state.tensors) {
      std::vector<float>& values = stage_values.emplace_back(num_params_);
      for (const Piece& t : pieces(slots_, plugin_.tensor_parallel()))
        std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(t.model), t.size, values.begin() + static_cast<std::ptrdiff_t>(t.local));
    }
  auto tensor = [&](size_t k) -> const std::vector<float>& {  // in the engine's flat order
    return split ? stage_values[k] : state.tensors[k].second;
  };
  const size_t r = static_cast<size_t>(layout_->rank());
  const std::vector<float>& full = tensor(0);  // master, flat order
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
    for (size_t k = 0; k < optimizer_state.size(); ++k) take_chunk(tensor(k + 1), state_p[k]);
    if (!policy_.parameters) {  // the whole unit, from the full state: no gather needed
      rounded.assign(u.padded(), 0.0f);
      std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(global), u.size, rounded.begin());
      cpu::from_float(config_.precision, rounded.data(), params_.data() + u.begin * elem_, u.padded());
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
  if (device_step_) {  // the host's values are the latest now
    device_step_->forget();
    if (device_gather_) device_gather_->forget();
    host_stale_ = false;
    device_layers_->forget_params();
  }
}

}  // namespace ds
