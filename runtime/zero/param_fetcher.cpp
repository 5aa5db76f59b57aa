// Stage 3 gathering with prefetch, a live cap and persistent layers (see param_fetcher.h).
#include "zero/param_fetcher.h"

#include <stdexcept>

#include <fmt/format.h>

#include "zero/collective_type.h"

namespace ds::zero {

ParamFetcher::ParamFetcher(const PartitionLayout& layout, ProcessGroup& group, const void* partition,
                           amp::Storage storage, FetchLimits limits, int64_t micro_batches)
    : layout_(layout),
      group_(group),
      partition_(static_cast<const std::byte*>(partition)),
      type_(collective_type(storage)),
      elem_(amp::storage_bytes(storage)),
      limits_(limits) {
  const size_t layers = layout.units().size();  // one unit per layer at stage 3
  for (int64_t m = 0; m < micro_batches; ++m) {
    for (size_t i = 0; i < layers; ++i) order_.push_back(i);
    for (size_t i = layers; i-- > 0;) order_.push_back(i);
  }
  state_.assign(layers, State::Released);
  ahead_.assign(layers, false);
  buffer_.resize(layers);
  pending_.resize(layers);
  int64_t persisted = 0;
  for (size_t i = 0; i < layers; ++i) {
    const auto size = static_cast<int64_t>(layout.units()[i].size);
    if (size == 0 || (size <= limits.persistence && persisted + size <= limits.model_persistence)) {
      state_[i] = State::Persistent;
      persisted += size;
      buffer_[i].resize(layout.units()[i].padded() * elem_);
      persistent_bytes_ += buffer_[i].size();
    }
  }
  end_step();
}

ParamFetcher::~ParamFetcher() {
  for (auto& work : pending_) {  // a step that failed half-way: no gather may outlive its buffer
    if (!work) continue;
    try {
      work->wait();
    } catch (...) {
    }
  }
}

void ParamFetcher::gather(size_t layer, bool ahead) {
  const Unit& u = layout_.units()[layer];
  buffer_[layer] = pool_.acquire(u.padded() * elem_);
  pending_[layer] = group_.allgather_async(partition_ + u.part_offset * elem_, buffer_[layer].data(), u.chunk, type_);
  state_[layer] = State::InFlight;
  held_elems_ += u.padded();
  ahead_[layer] = ahead;
  if (ahead) ahead_elems_ += u.padded();
}

void ParamFetcher::prefetch_after(size_t position) {
  for (size_t k = position + 1; k < order_.size(); ++k) {
    const size_t layer = order_[k];
    if (state_[layer] != State::Released) continue;
    const size_t n = layout_.units()[layer].padded();
    if (ahead_elems_ + n > static_cast<size_t>(limits_.prefetch_elems) ||
        held_elems_ + n > static_cast<size_t>(limits_.max_live_elems))
      return;
    gather(layer, true);
  }
}

const void* ParamFetcher::acquire(size_t layer) {
  if (position_ >= order_.size() || order_[position_] != layer)
    throw std::logic_error(fmt::format("ParamFetcher: layer {} acquired out of order", layer));
  if (state_[layer] == State::Released) gather(layer, false);
  if (ahead_[layer]) {
    ahead_[layer] = false;
    ahead_elems_ -= layout_.units()[layer].padded();
  }
  prefetch_after(position_);
  if (state_[layer] == State::InFlight) {
    pending_[layer]->wait();
    pending_[layer].reset();
    state_[layer] = State::Live;
  }
  return buffer_[layer].data();
}

void ParamFetcher::release(size_t layer) {
  if (position_ >= order_.size() || order_[position_] != layer)
    throw std::logic_error(fmt::format("ParamFetcher: layer {} released out of order", layer));
  ++position_;
  if (state_[layer] == State::Persistent) return;
  if (position_ < order_.size() && order_[position_] == layer) return;  // used again right away
  held_elems_ -= layout_.units()[layer].padded();
  pool_.release(std::move(buffer_[layer]));
  buffer_[layer] = {};
  state_[layer] = State::Released;
}

void ParamFetcher::end_step() {
  position_ = 0;
  std::vector<std::unique_ptr<Work>> gathers;
  for (size_t i = 0; i < state_.size(); ++i) {
    const Unit& u = layout_.units()[i];
    if (state_[i] == State::Persistent && u.chunk > 0)
      gathers.push_back(group_.allgather_async(partition_ + u.part_offset * elem_, buffer_[i].data(), u.chunk, type_));
  }
  for (auto& work : gathers) work->wait();
}

}  // namespace ds::zero
