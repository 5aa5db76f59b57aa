// DeviceGather (device_gather.h): stage 3's partition on the device and the layers' gathers there.
#include "engine/device_gather.h"

#include <algorithm>
#include <stdexcept>

namespace ds {

DeviceGather::DeviceGather(backend::Device& device, DeviceLayers& layers, Plan plan)
    : device_(device), layers_(layers), plan_(std::move(plan)) {
  partition_ = static_cast<float*>(allocate(plan_.n * sizeof(float)));
  device_.zero(partition_, plan_.n * sizeof(float));
  size_t padded = 0, views = 0;
  for (const Unit& u : plan_.units) padded = std::max(padded, u.padded);
  for (const Layer& l : plan_.layers) {
    if (l.unit >= plan_.units.size()) throw std::logic_error("DeviceGather: a layer's unit is not in the layout");
    std::vector<size_t>& at = aligned_.emplace_back();
    size_t floats = 0;
    for (const Param& p : l.params) {
      at.push_back(floats);
      if (!p.tie) floats += (p.size + 3) / 4 * 4;  // 16-byte aligned, as DeviceLayers lays its views out
    }
    views = std::max(views, floats);
  }
  const bool several = plan_.group != nullptr && plan_.group->size() > 1;
  if (several) landing_ = static_cast<float*>(allocate(padded * sizeof(float)));
  for (Slot& slot : slots_) slot.views = static_cast<float*>(allocate(views * sizeof(float)));
  for (const Tie& tie : plan_.ties) tie_copies_.push_back(static_cast<float*>(allocate(tie.size * sizeof(float))));
}

DeviceGather::~DeviceGather() {
  for (Slot& slot : slots_) {
    try {
      if (slot.gathering) slot.gathering->wait();  // no collective may outlive its buffer
    } catch (...) {  // a failed step: that error was the one reported
    }
  }
  for (void* p : owned_) {
    try {
      device_.release(p);
    } catch (...) {  // as above
    }
  }
}

void* DeviceGather::allocate(size_t bytes) {
  owned_.reserve(owned_.size() + 1);
  owned_.push_back(device_.allocate(bytes > 0 ? bytes : 1));
  held_.params += bytes;
  return owned_.back();
}

void DeviceGather::load(const float* values) {
  updated();
  device_.to_device(partition_, values, plan_.n * sizeof(float));
  loaded_ = true;
}

void DeviceGather::store(float* values) { device_.to_host(values, partition_, plan_.n * sizeof(float)); }

void DeviceGather::updated() {
  for (Slot& slot : slots_) {
    if (slot.gathering) slot.gathering->wait();  // (of the old values: dropped)
    slot.gathering.reset();
    revoke(slot);
  }
  current_.reset();
}

void DeviceGather::forget() {
  updated();
  loaded_ = false;
}

void DeviceGather::revoke(Slot& slot) {
  if (slot.layer) layers_.withdraw_params(*slot.layer);
  slot.layer.reset();
  slot.ready = false;
}

void DeviceGather::acquire(size_t layer, std::optional<size_t> next) {
  if (!loaded_) throw std::logic_error("DeviceGather: acquire() before load()");
  auto holding = [&](size_t l) {
    for (size_t s = 0; s < 2; ++s)
      if (slots_[s].layer == l) return std::optional<size_t>(s);
    return std::optional<size_t>();
  };
  std::optional<size_t> s = holding(layer);
  if (!s) {  // not prefetched: gathered now, into the slot that the layer acquired last does not hold
    s = current_ ? 1 - *current_ : 0;
    start_gather(layer, *s);
  }
  if (!slots_[*s].ready) finish_gather(*s);
  current_ = s;
  const Layer& l = plan_.layers[layer];
  std::vector<ds_tensor> views;
  for (size_t k = 0; k < l.params.size(); ++k) {
    const Param& p = l.params[k];
    float* at = p.tie ? tie_copies_[*p.tie] : slots_[*s].views + aligned_[layer][k];
    views.push_back(ds_tensor{at, DS_F32, p.shape, device_.table()->device});
  }
  layers_.provide_params(layer, std::move(views));
  if (next && *next != layer && !holding(*next)) start_gather(*next, 1 - *s);
}

void DeviceGather::start_gather(size_t layer, size_t s) {
  for (Slot& other : slots_)
    if (other.gathering) {  // a prefetch the engine did not take: the landing buffer is needed
      other.gathering->wait();
      other.gathering.reset();
      revoke(other);
    }
  Slot& slot = slots_[s];
  revoke(slot);
  slot.layer = layer;
  const Unit& u = plan_.units[plan_.layers[layer].unit];
  if (landing_ == nullptr || u.chunk == 0) return;  // one rank: finish_gather copies from the partition
  device_.synchronize();  // the group's stream reads the partition (updated by ops) into a buffer the ops read last
  slot.gathering = plan_.group->allgather_async(partition_ + u.part_offset, landing_, u.chunk, DataType::F32);
}

// The gathered unit into the slot's views (later ops than those that read the views before: stream order),
// and the tied copies of the parameters the layer owns.
void DeviceGather::finish_gather(size_t s) {
  Slot& slot = slots_[s];
  if (slot.gathering) slot.gathering->wait();  // later ops are issued after: they see the output
  slot.gathering.reset();
  const size_t layer = *slot.layer;
  const Layer& l = plan_.layers[layer];
  const Unit& u = plan_.units[l.unit];
  const float* values = landing_ != nullptr ? landing_ : partition_ + u.part_offset;
  for (size_t k = 0; k < l.params.size(); ++k) {
    const Param& p = l.params[k];
    if (!p.tie) device_.copy_within(slot.views + aligned_[layer][k], values + p.in_unit, p.size * sizeof(float));
  }
  for (size_t t = 0; t < plan_.ties.size(); ++t) {
    const Tie& tie = plan_.ties[t];
    if (tie.owner_layer == layer) device_.copy_within(tie_copies_[t], values + tie.owner_in_unit, tie.size * sizeof(float));
  }
  slot.ready = true;
}

}  // namespace ds
