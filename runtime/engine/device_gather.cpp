// DeviceGather (device_gather.h): stage 3's partition on the device and the layers' gathers there.
#include "engine/device_gather.h"

#include <algorithm>
#include <stdexcept>

#include "zero/collective_type.h"

namespace ds {

DeviceGather::DeviceGather(backend::Device& device, DeviceLayers& layers, Plan plan)
    : device_(device), layers_(layers), plan_(std::move(plan)), elem_(plan_.storage ? sizeof(uint16_t) : sizeof(float)) {
  partition_ = static_cast<std::byte*>(allocate(plan_.n * elem_));
  device_.zero(partition_, plan_.n * elem_);
  size_t padded = 0, views = 0;
  for (const Unit& u : plan_.units) padded = std::max(padded, u.padded);
  std::vector<size_t> floats;  // per layer: its views' size
  for (const Layer& l : plan_.layers) {
    if (l.unit >= plan_.units.size()) throw std::logic_error("DeviceGather: a layer's unit is not in the layout");
    std::vector<size_t>& at = aligned_.emplace_back();
    size_t& n = floats.emplace_back(0);
    for (const Param& p : l.params) {
      at.push_back(n);
      if (!p.tie) n += (p.size + 3) / 4 * 4;  // 16-byte aligned, as DeviceLayers lays its views out
    }
    if (!l.persistent) views = std::max(views, n);
  }
  const bool several = plan_.group != nullptr && plan_.group->size() > 1;
  if (several) landing_ = static_cast<std::byte*>(allocate(padded * elem_));
  slots_.resize(2);
  for (Slot& slot : slots_) slot.views = static_cast<float*>(allocate(views * sizeof(float)));
  for (size_t i = 0; i < plan_.layers.size(); ++i) {
    if (!plan_.layers[i].persistent) {
      kept_.emplace_back();
      continue;
    }
    kept_.emplace_back(slots_.size());
    slots_.emplace_back().views = static_cast<float*>(allocate(floats[i] * sizeof(float)));
  }
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

float* DeviceGather::partition() {
  if (plan_.storage) throw std::logic_error("DeviceGather: a 16-bit partition is written by take_master");
  return reinterpret_cast<float*>(partition_);
}

void DeviceGather::take_master(const float* master) {
  if (!plan_.storage) throw std::logic_error("DeviceGather: an fp32 partition is the master");
  device_.narrow(*plan_.storage, master, reinterpret_cast<uint16_t*>(partition_), plan_.n);
}

void DeviceGather::load(const void* values) {
  updated();
  device_.to_device(partition_, values, plan_.n * elem_);
  loaded_ = true;
}

void DeviceGather::store(void* values) { device_.to_host(values, partition_, plan_.n * elem_); }

void DeviceGather::updated() {
  for (Slot& slot : slots_) drop(slot);  // (a gather under way is of the old values)
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

void DeviceGather::drop(Slot& slot) {
  if (slot.gathering) slot.gathering->wait();
  slot.gathering.reset();
  revoke(slot);
}

void DeviceGather::acquire(size_t layer, std::optional<size_t> next) {
  if (!loaded_) throw std::logic_error("DeviceGather: acquire() before load()");
  auto holding = [&](size_t l) {
    if (kept_[l]) return slots_[*kept_[l]].layer == l ? kept_[l] : std::nullopt;
    for (size_t s = 0; s < 2; ++s)
      if (slots_[s].layer == l) return std::optional<size_t>(s);
    return std::optional<size_t>();
  };
  // Where a gather of l goes: its own slot, or the one that the layer not persistent acquired last does not hold.
  auto slot_for = [&](size_t l) { return kept_[l] ? *kept_[l] : current_ ? 1 - *current_ : 0; };
  std::optional<size_t> s = holding(layer);
  if (!s) {  // not prefetched: gathered now
    s = slot_for(layer);
    start_gather(layer, *s);
  }
  if (!slots_[*s].ready) finish_gather(*s);
  if (!kept_[layer]) current_ = s;
  const Layer& l = plan_.layers[layer];
  std::vector<ds_tensor> views;
  for (size_t k = 0; k < l.params.size(); ++k) {
    const Param& p = l.params[k];
    float* at = p.tie ? tie_copies_[*p.tie] : slots_[*s].views + aligned_[layer][k];
    views.push_back(ds_tensor{at, DS_F32, p.shape, device_.table()->device});
  }
  layers_.provide_params(layer, std::move(views));
  if (next && *next != layer && !holding(*next)) start_gather(*next, slot_for(*next));
}

void DeviceGather::start_gather(size_t layer, size_t s) {
  for (Slot& other : slots_)
    if (other.gathering) drop(other);  // a prefetch the engine did not take: the landing buffer is needed
  Slot& slot = slots_[s];
  revoke(slot);
  slot.layer = layer;
  const Unit& u = plan_.units[plan_.layers[layer].unit];
  if (landing_ == nullptr || u.chunk == 0) return;  // one rank: finish_gather copies from the partition
  // After the ops issued so far (the group orders after the device's stream): those that updated the partition
  // and those that read the landing buffer last.
  slot.gathering = plan_.group->allgather_async(partition_ + u.part_offset * elem_, landing_, u.chunk,
                                                zero::collective_type(plan_.storage));
}

// The gathered unit into the slot's views, widened from 16 bits or copied (later ops than those that read the
// views before: stream order), and the tied copies of the parameters the layer owns.
void DeviceGather::finish_gather(size_t s) {
  Slot& slot = slots_[s];
  if (slot.gathering) slot.gathering->wait();  // later ops are issued after: they see the output
  slot.gathering.reset();
  const size_t layer = *slot.layer;
  const Layer& l = plan_.layers[layer];
  const Unit& u = plan_.units[l.unit];
  const std::byte* values = landing_ != nullptr ? landing_ : partition_ + u.part_offset * elem_;
  auto take = [&](float* to, size_t in_unit, size_t n) {
    if (plan_.storage) device_.widen(*plan_.storage, reinterpret_cast<const uint16_t*>(values) + in_unit, to, n);
    else device_.copy_within(to, reinterpret_cast<const float*>(values) + in_unit, n * sizeof(float));
  };
  for (size_t k = 0; k < l.params.size(); ++k) {
    const Param& p = l.params[k];
    if (!p.tie) take(slots_[s].views + aligned_[layer][k], p.in_unit, p.size);
  }
  for (size_t t = 0; t < plan_.ties.size(); ++t)
    if (plan_.ties[t].owner_layer == layer) take(tie_copies_[t], plan_.ties[t].owner_in_unit, plan_.ties[t].size);
  slot.ready = true;
}

}  // namespace ds
