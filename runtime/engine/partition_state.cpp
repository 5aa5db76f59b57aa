// The rank's partition of the optimizer's side of the model: the fp32 master copy and the optimizer
// state, in memory or (ZeRO-Infinity, offload_optimizer device nvme) in a swap file that the update
// streams through sub-group by sub-group (runtime/offload). Read and written whole, in fp32, for
// checkpoints and gather_parameters. With the parameters offloaded too (offload_param device nvme,
// stage 3), their partition lives in a swap file of its own.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "cpu/convert.h"
#include "engine/engine.h"

namespace ds {

void Engine::for_each_owned(size_t begin, size_t count,
                            const std::function<void(const zero::Unit&, size_t lo, size_t hi)>& fn) const {
  for (const zero::Unit& u : layout_->units()) {
    const size_t lo = std::max(begin, u.part_offset), hi = std::min(begin + count, u.part_offset + u.chunk);
    if (lo < hi) fn(u, lo, hi);
  }
}

// The optimizer is made for 0 elements: its state lives in the swap file, after the master copy
// when that is there too. Nothing to offload (fp32 SGD without momentum): the in-memory optimizer.
void Engine::open_swap(const std::function<std::unique_ptr<Optimizer>(size_t)>& make) {
  const offload::SwapConfig& c = *config_.nvme_offload;
  optimizer_ = make(0);
  if (!optimizer_->elementwise())
    throw ConfigError("zero_optimization.offload_optimizer: device \"nvme\" streams the optimizer state sub-group by "
                      "sub-group, which needs an element-wise optimizer (Adam, AdamW, Adagrad, RMSprop, SGD or Lion)");
  std::vector<size_t> stream_bytes;
  if (master_on_nvme_) stream_bytes.push_back(sizeof(float));
  for (const StateView& v : optimizer_->state()) stream_bytes.push_back(amp::storage_bytes(v.storage));
  if (stream_bytes.empty()) {
    optimizer_ = make(layout_->partition_size());
    return;
  }
  try {
    swapper_ = std::make_unique<offload::StateSwapper>(
        stream_bytes, layout_->partition_size(), c.sub_group, c.buffer_count, c.dir, c.aio, c.allow_buffered,
        fmt::format("zero_optimization.offload_optimizer.nvme_path (rank {})", group_.rank()));
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

// The persistent layers stay in memory (they are gathered after every step), and so do the next
// layers in order while their chunks add up to at most max_in_cpu elements; the rest is swapped.
void Engine::open_param_swap() {
  const offload::ParamSwapConfig& c = *config_.param_offload;
  const std::vector<bool> persistent = zero::ParamFetcher::persistent_layers(*layout_, config_.stage3);
  std::vector<size_t> chunk_bytes;
  std::vector<bool> kept;
  size_t in_cpu = 0;
  for (size_t i = 0; i < layout_->units().size(); ++i) {
    const zero::Unit& u = layout_->units()[i];
    const bool keep = persistent[i] || in_cpu + u.chunk <= c.max_in_cpu;
    if (keep && !persistent[i]) in_cpu += u.chunk;
    if (!keep && u.chunk > c.buffer_size)
      throw ConfigError(fmt::format("zero_optimization.offload_param.buffer_size: {} elements is less than layer '{}''s "
                                    "chunk of {} elements on each rank; raise it to at least that",
                                    c.buffer_size, layers_[u.first_layer].name, u.chunk));
    chunk_bytes.push_back(u.chunk * elem_);
    kept.push_back(keep);
  }
  try {
    auto swapper = std::make_unique<offload::ParamSwapper>(
        chunk_bytes, kept, c.buffer_count, c.dir, c.aio, c.allow_buffered,
        fmt::format("zero_optimization.offload_param.nvme_path (rank {})", group_.rank()));
    param_swapper_ = swapper.get();
    chunks_ = std::move(swapper);
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

std::vector<Segment> Engine::segments_in(size_t begin, size_t count, std::byte* master) const {
  std::vector<Segment> out;
  size_t at = 0;  // the segment's first element
  for (const Segment& s : segments_) {
    const size_t lo = std::max(begin, at), hi = std::min(begin + count, at + s.size);
    if (lo < hi) {
      Segment piece = s;
      piece.size = hi - lo;
      piece.grads = static_cast<const std::byte*>(s.grads) + (lo - at) * amp::storage_bytes(s.grad_type);
      if (master) {
        piece.params = master + (lo - begin) * sizeof(float);
        piece.param_type = amp::Storage::F32;
      } else {
        piece.params = static_cast<std::byte*>(s.params) + (lo - at) * amp::storage_bytes(s.param_type);
      }
      out.push_back(piece);
    }
    at += s.size;
  }
  return out;
}

// One optimizer update, sub-group by sub-group; with the master copy on NVMe each sub-group's new
// master values are rounded into the 16-bit parameters at once.
void Engine::update_swapped(double lr) {
  const std::vector<StateView> kinds = optimizer_->state();  // names and storage, 0 elements
  const size_t first = master_on_nvme_ ? 1 : 0;
  std::vector<StateView> state(kinds);
  swapper_->pass(true, true, [&](size_t begin, size_t count, std::span<std::byte* const> streams) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      state[k].data = streams[first + k];
      state[k].size = count;
    }
    optimizer_->step_with_state(segments_in(begin, count, master_on_nvme_ ? streams[0] : nullptr), state, lr, updates_);
    if (!master_on_nvme_) return;
    const auto* master = reinterpret_cast<const float*>(streams[0]);
    for_each_owned(begin, count, [&](const zero::Unit& u, size_t lo, size_t hi) {
      put_params(u, lo - u.part_offset, master + (lo - begin), hi - lo);
    });
  });
}

void Engine::read_partition(std::vector<float>& master_p, std::vector<std::vector<float>>* state) {
  sync_host();
  const size_t partition = layout_->partition_size();
  master_p.assign(partition, 0.0f);
  const std::vector<StateView> own = optimizer_->state();
  if (state) state->assign(own.size(), std::vector<float>(partition, 0.0f));
  if (!master_on_nvme_)
    for (const zero::Unit& u : layout_->units())
      cpu::to_float(master_storage(), master(u), master_p.data() + u.part_offset, u.chunk);
  if (!swapper_) {
    if (state)
      for (size_t k = 0; k < own.size(); ++k) cpu::to_float(own[k].storage, own[k].data, (*state)[k].data(), partition);
    return;
  }
  if (!master_on_nvme_ && !state) return;
  const size_t first = master_on_nvme_ ? 1 : 0;
  swapper_->pass(true, false, [&](size_t begin, size_t count, std::span<std::byte* const> streams) {
    if (master_on_nvme_) std::memcpy(master_p.data() + begin, streams[0], count * sizeof(float));
    if (state)
      for (size_t k = 0; k < own.size(); ++k)
        cpu::to_float(own[k].storage, streams[first + k], (*state)[k].data() + begin, count);
  });
}

void Engine::store_partition(const std::vector<float>& master_p, const std::vector<std::vector<float>>& state) {
  const std::vector<StateView> own = optimizer_->state();
  for (const zero::Unit& u : layout_->units()) {
    const float* values = master_p.data() + u.part_offset;
    if (!master_on_nvme_) cpu::from_float(master_storage(), values, master(u), u.chunk);
    if (master_on_nvme_ || !master_.empty()) put_params(u, 0, values, u.chunk);  // the parameters are a copy
  }
  if (!swapper_) {
    for (size_t k = 0; k < own.size(); ++k) cpu::from_float(own[k].storage, state[k].data(), own[k].data, own[k].size);
    return;
  }
  const size_t first = master_on_nvme_ ? 1 : 0;
  swapper_->pass(false, true, [&](size_t begin, size_t count, std::span<std::byte* const> streams) {
    if (master_on_nvme_) std::memcpy(streams[0], master_p.data() + begin, count * sizeof(float));
    for (size_t k = 0; k < own.size(); ++k)
      cpu::from_float(own[k].storage, state[k].data() + begin, streams[first + k], count);
  });
}

}  // namespace ds
