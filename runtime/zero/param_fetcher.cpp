// Stage 3 gathering with prefetch, a live cap, persistent layers and chunks read ahead (see param_fetcher.h).
#include "zero/param_fetcher.h"

#include <stdexcept>

#include <fmt/format.h>

#include "zero/collective_type.h"

namespace ds::zero {

std::vector<bool> ParamFetcher::persistent_layers(const PartitionLayout& layout, const FetchLimits& limits) {
  std::vector<bool> persistent;
  int64_t persisted = 0;
  for (const Unit& u : layout.units()) {  // one unit per layer at stage 3
    const auto size = static_cast<int64_t>(u.size);
    const bool keep = size == 0 || (size <= limits.persistence && persisted + size <= limits.model_persistence);
    if (keep) persisted += size;
    persistent.push_back(keep);
  }
  return persistent;
}

ParamFetcher::ParamFetcher(const PartitionLayout& layout, ProcessGroup& group, ChunkSource& chunks,
                           amp::Storage storage, FetchLimits limits, int64_t micro_batches,
                           std::function<void(std::span<std::byte>)> on_new_buffer)
    : layout_(layout),
      group_(group),
      chunks_(chunks),
      type_(collective_type(storage)),
      elem_(amp::storage_bytes(storage)),
      limits_(limits) {
  pool_.on_new_buffer(on_new_buffer);
  const size_t layers = layout.units().size();
  for (int64_t m = 0; m < micro_batches; ++m) {
    for (size_t i = 0; i < layers; ++i) order_.push_back(i);
    for (size_t i = layers; i-- > 0;) order_.push_back(i);
  }
  state_.assign(layers, State::Released);
  ahead_.assign(layers, false);
  serves_.assign(layers, 0);
  buffer_.resize(layers);
  pending_.resize(layers);
  holds_chunk_.assign(layers, false);
  const std::vector<bool> persistent = persistent_layers(layout, limits);
  for (size_t i = 0; i < layers; ++i) {
    if (!persistent[i]) continue;
    if (layout.units()[i].chunk > 0 && !chunks.in_memory(i))
      throw std::logic_error(fmt::format("ParamFetcher: persistent layer {} is not in memory", i));
    state_[i] = State::Persistent;
    buffer_[i].resize(layout.units()[i].padded() * elem_);
    persistent_bytes_ += buffer_[i].size();
    if (on_new_buffer && buffer_[i].capacity() > 0)
      on_new_buffer(std::span<std::byte>(buffer_[i].data(), buffer_[i].capacity()));
  }
  // A use gathers unless its layer is persistent or was used right before (kept): those gathers, in
  // order, are the reads of the chunks not in memory.
  for (size_t k = 0; k < order_.size(); ++k) {
    const size_t layer = order_[k];
    const bool gathers = !persistent[layer] && (k == 0 || order_[k - 1] != layer);
    if (gathers && layout.units()[layer].chunk > 0 && !chunks.in_memory(layer)) reads_.push_back(layer);
  }
  end_step();
}

ParamFetcher::~ParamFetcher() {
  // A step that failed half-way: no gather may outlive its buffer, no chunk stay held.
  for (size_t layer = 0; layer < pending_.size(); ++layer) {
    try {
      finish_gather(layer);
    } catch (...) {
    }
  }
  try {
    discard_reads();
  } catch (...) {
  }
}

void ParamFetcher::finish_gather(size_t layer) {
  if (pending_[layer]) {
    std::unique_ptr<Work> work = std::move(pending_[layer]);
    work->wait();
  }
  if (holds_chunk_[layer]) {
    holds_chunk_[layer] = false;
    chunks_.release(layer);
  }
}

void ParamFetcher::read_ahead() {
  while (reads_started_ < reads_.size() && chunks_.can_read()) chunks_.read(reads_[reads_started_++]);
}

void ParamFetcher::discard_reads() {
  for (; reads_used_ < reads_started_; ++reads_used_) {
    chunks_.wait(reads_[reads_used_]);
    chunks_.release(reads_[reads_used_]);
  }
}

void ParamFetcher::gather(size_t layer, size_t use) {
  const bool ahead = use != position_;
  const Unit& u = layout_.units()[layer];
  const std::byte* chunk = chunks_.in_memory(layer);
  if (!chunk && u.chunk > 0) {  // the next read in order is this gather's
    if (reads_used_ >= reads_.size() || reads_[reads_used_] != layer)
      throw std::logic_error(fmt::format("ParamFetcher: layer {} gathered out of the order of its reads", layer));
    if (reads_started_ == reads_used_) {
      chunks_.read(layer);
      ++reads_started_;
    }
    chunk = chunks_.wait(layer);
    ++reads_used_;
    holds_chunk_[layer] = true;
  }
  buffer_[layer] = pool_.acquire(u.padded() * elem_);
  pending_[layer] = group_.allgather_async(chunk, buffer_[layer].data(), u.chunk, type_);
  state_[layer] = State::InFlight;
  serves_[layer] = use;
  held_elems_ += u.padded();
  ahead_[layer] = ahead;
  if (ahead) ahead_elems_ += u.padded();
}

// Prefetches follow the order of the step's gathers: past the uses that gather nothing (a persistent
// layer, a layer kept from the use before) and those already gathered ahead, up to the first that
// exceeds a limit, needs a layer still held for an earlier use, or waits for a free read buffer.
void ParamFetcher::prefetch_after(size_t position) {
  for (size_t k = position + 1; k < order_.size(); ++k) {
    const size_t layer = order_[k];
    if (state_[layer] == State::Persistent || order_[k - 1] == layer) continue;
    if (state_[layer] != State::Released) {
      if (serves_[layer] == k) continue;
      return;
    }
    const size_t n = layout_.units()[layer].padded();
    if (ahead_elems_ + n > static_cast<size_t>(limits_.prefetch_elems) ||
        held_elems_ + n > static_cast<size_t>(limits_.max_live_elems))
      return;
    const bool unread = layout_.units()[layer].chunk > 0 && !chunks_.in_memory(layer) && reads_started_ == reads_used_;
    if (unread && !chunks_.can_read()) return;
    gather(layer, k);
  }
}

const void* ParamFetcher::acquire(size_t layer) {
  if (position_ >= order_.size() || order_[position_] != layer)
    throw std::logic_error(fmt::format("ParamFetcher: layer {} acquired out of order", layer));
  if (state_[layer] == State::Released) gather(layer, position_);
  if (ahead_[layer]) {
    ahead_[layer] = false;
    ahead_elems_ -= layout_.units()[layer].padded();
  }
  prefetch_after(position_);
  if (state_[layer] == State::InFlight) {
    finish_gather(layer);
    state_[layer] = State::Live;
  }
  read_ahead();
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
  discard_reads();  // none after a whole step
  reads_started_ = reads_used_ = 0;
  std::vector<std::unique_ptr<Work>> gathers;
  for (size_t i = 0; i < state_.size(); ++i) {
    const Unit& u = layout_.units()[i];
    if (state_[i] == State::Persistent && u.chunk > 0)
      gathers.push_back(group_.allgather_async(chunks_.in_memory(i), buffer_[i].data(), u.chunk, type_));
  }
  for (auto& work : gathers) work->wait();
  read_ahead();
}

}  // namespace ds::zero
