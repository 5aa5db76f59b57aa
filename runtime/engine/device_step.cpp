// DeviceStep (device_step.h): the gradients' reduction, the norm and the optimizer's update over the layers'
// device buffers, and the partitioned parameters' gather.
#include "engine/device_step.h"

#include <algorithm>
#include <stdexcept>

#include "zero/collective_type.h"

namespace ds {

DeviceStep::DeviceStep(backend::Device& device, DeviceLayers& layers, Plan plan)
    : device_(device), layers_(layers), tensors_(std::move(plan.tensors)), ties_(std::move(plan.ties)), n_(plan.n),
      rounding_(plan.rounding), grad_rounding_(plan.grad_rounding), group_(plan.group), units_(std::move(plan.units)),
      partitioned_(plan.partitioned), partition_grads_(plan.partition_grads), gathered_(plan.gathered) {
  if (partition_grads_ && !partitioned_) throw std::logic_error("DeviceStep: partition_grads without a partition");
  if (partitioned_ && units_.empty()) throw std::logic_error("DeviceStep: partitioned without the layout's units");
  const size_t layout_units = plan.layout_units;
  if (rounding_) master_ = static_cast<float*>(allocate(n_ * sizeof(float), &MemoryReport::optimizer_state));
  for (size_t k = 0; k < plan.state_buffers; ++k) state_.push_back(static_cast<float*>(allocate(n_ * sizeof(float), &MemoryReport::optimizer_state)));
  sums_ = static_cast<double*>(allocate(std::max<size_t>(1, 2 * tensors_.size()) * sizeof(double), &MemoryReport::workspace));
  if (partition_grads_) partition_ = static_cast<float*>(allocate(n_ * sizeof(float), &MemoryReport::grads));
  size_t padded = 0, chunk = 0, exchanged = 0;
  for (const Unit& u : units_) {
    padded = std::max(padded, u.padded);
    chunk = std::max(chunk, u.chunk);
    exchanged += u.chunk > 0 ? 1 : 0;
  }
  slots_ = std::min<size_t>(2, exchanged);  // two, so that a unit's sum runs while the next one is copied in
  // Replicas move only the gradients through it: in 16 bits with 16-bit accumulation (as DeepSpeed's stage 0
  // flattens its buckets: the unit's size in the gradients' type).
  const size_t unit_element = !partitioned_ && grad_rounding_ ? sizeof(uint16_t) : sizeof(float);
  for (size_t slot = 0; slot < slots_; ++slot) {
    unit_buffer_[slot] = static_cast<float*>(allocate(padded * unit_element, &MemoryReport::workspace));
    if (partitioned_) chunk_buffer_[slot] = static_cast<float*>(allocate(chunk * sizeof(float), &MemoryReport::workspace));
  }
  unit_tensors_.resize(layout_units);
  for (const Tensor& t : tensors_) {
    if (t.unit >= layout_units) throw std::logic_error("DeviceStep: a tensor's unit is not in the layout");
    unit_tensors_[t.unit].push_back(&t);
  }
  begun_.assign(layout_units, false);
  for (const Tie& tie : ties_) {
    const auto owner = std::find_if(tensors_.begin(), tensors_.end(), [&](const Tensor& t) {
      return t.layer == tie.owner_layer && t.index == tie.owner_index;
    });
    if (owner == tensors_.end()) throw std::logic_error("DeviceStep: a tie's owner is not among the tensors");
    tie_units_.push_back(owner->unit);
  }
}

DeviceStep::~DeviceStep() {
  for (Exchanging& e : exchanging_) {  // a step that failed half-way: no collective may outlive its buffer
    try {
      e.work->wait();
    } catch (...) {
    }
  }
  for (void* p : owned_) {
    try {
      device_.release(p);
    } catch (...) {  // a device that failed: that error was the one reported
    }
  }
}

void* DeviceStep::allocate(size_t bytes, size_t MemoryReport::*kind) {
  owned_.reserve(owned_.size() + 1);
  owned_.push_back(device_.allocate(bytes > 0 ? bytes : 1));
  held_.*kind += bytes;
  return owned_.back();
}

float* DeviceStep::param(const Tensor& t) const { return static_cast<float*>(layers_.device_params(t.layer)[t.index].data); }

float* DeviceStep::grad(const Tensor& t) const {
  return static_cast<float*>(layers_.device_grads(t.layer)[t.index].data);
}

std::vector<DeviceStep::RoundTensor> DeviceStep::in_place(const std::vector<const Tensor*>& tensors) const {
  std::vector<RoundTensor> whole;
  for (const Tensor* t : tensors) whole.push_back({grad(*t), grad(*t), t->size});
  return whole;
}

float* DeviceStep::grad_part(const Tensor& t) const { return partition_grads_ ? partition_ + t.offset : grad(t) + t.from; }

std::vector<DeviceStep::Values> DeviceStep::grad_parts() const {
  std::vector<Values> parts;
  for (const Tensor& t : tensors_)
    if (t.count > 0) parts.push_back({grad_part(t), t.count});
  return parts;
}

void DeviceStep::load(const float* master, std::span<const StateView> state) {
  if ((master != nullptr) != (master_ != nullptr) || state.size() != state_.size())
    throw std::logic_error("DeviceStep: load() with another master or state than planned");
  if (master_) device_.to_device(master_, master, n_ * sizeof(float));
  for (size_t k = 0; k < state_.size(); ++k) {
    if (state[k].storage != amp::Storage::F32 || state[k].size != n_)
      throw std::logic_error("DeviceStep: the optimizer's state is not fp32 [n]");
    if (state[k].data == nullptr) device_.zero(state_[k], n_ * sizeof(float));  // a fresh state
    else device_.to_device(state_[k], state[k].data, n_ * sizeof(float));
  }
  loaded_ = true;
}

void DeviceStep::begin_step() {
  if (partition_grads_) device_.zero(partition_, n_ * sizeof(float));
}

void DeviceStep::end_micro_batch(double pre) {
  if (partition_grads_) {  // every micro-batch's sums go into the partition
    start_unreported_sums(pre);
    return;
  }
  if (std::find(begun_.begin(), begun_.end(), true) != begun_.end())
    throw std::logic_error("DeviceStep: end_micro_batch() after a unit's finish began (unit_done rounds it)");
  if (grad_rounding_) {
    std::vector<RoundTensor> rounded;
    for (const Tensor& t : tensors_) rounded.push_back({grad(t), grad(t), t.size});
    device_.round_into(*grad_rounding_, rounded);
  }
}

// Rounded first (16-bit accumulation: as the host's buffers hold the sums), then the ties whose owner is in
// the unit joined (their users come later in layer order: backward is done with them), the owners rounded
// again; with several ranks, scaled by `pre` (and rounded again) and the unit's sum started through one of
// the buffer slots (when both are under way, the next waits for the first): replicas all-reduce it,
// partitions reduce-scatter it, so that backward goes on while the group's stream sums.
void DeviceStep::unit_done(size_t unit, double pre) {
  if (begun_[unit]) return;
  begun_[unit] = true;
  const std::vector<const Tensor*>& mine = unit_tensors_[unit];
  if (grad_rounding_) device_.round_into(*grad_rounding_, in_place(mine));
  for (size_t i = 0; i < ties_.size(); ++i) {
    if (tie_units_[i] != unit) continue;
    const Tie& tie = ties_[i];
    const ds_tensor& from = layers_.device_grads(tie.layer)[tie.index];
    const size_t size = static_cast<size_t>(shape_numel(from.shape));
    float* owner = static_cast<float*>(layers_.device_grads(tie.owner_layer)[tie.owner_index].data);
    device_.accumulate(owner, static_cast<const float*>(from.data), size);
    if (grad_rounding_) device_.round_to(*grad_rounding_, owner, size);
  }
  if (group_ == nullptr || group_->size() == 1 || mine.empty()) return;
  if (pre != 1.0) {
    std::vector<Values> grads;
    for (const Tensor* t : mine) grads.push_back({grad(*t), t->size});
    device_.rescale_all(grads, pre);
    if (grad_rounding_) device_.round_into(*grad_rounding_, in_place(mine));  // as the host scales its 16-bit sums
  }
  if (units_[unit].chunk == 0) return;
  if (exchanging_.size() == slots_) finish_oldest_exchange();
  const size_t slot = exchanging_.empty() ? 0 : (exchanging_.back().slot + 1) % slots_;
  exchanging_.push_back({unit, slot, start_exchange(grads_exchange(), unit, slot)});
}

void DeviceStep::finish_gradients(double pre, double post) {
  start_unreported_sums(pre);
  if (group_ == nullptr || group_->size() == 1) return;
  while (!exchanging_.empty()) finish_oldest_exchange();
  const std::vector<Values> parts = grad_parts();
  if (post != 1.0) device_.rescale_all(parts, post);
  if (grad_rounding_) {
    std::vector<RoundTensor> rounded;
    for (const Values& part : parts) rounded.push_back({part.x, part.x, part.n});
    device_.round_into(*grad_rounding_, rounded);
  }
}

void DeviceStep::start_unreported_sums(double pre) {
  for (size_t k = begun_.size(); k-- > 0;) unit_done(k, pre);  // those the backward pass did not report
  std::fill(begun_.begin(), begun_.end(), false);
}

void DeviceStep::finish_oldest_exchange() {
  Exchanging& oldest = exchanging_.front();
  finish_exchange(grads_exchange(), oldest.unit, oldest.slot, *oldest.work);
  exchanging_.pop_front();
}

double DeviceStep::sum_squares() {
  device_.zero(sums_, sizeof(double));
  std::vector<backend::Device::Floats> parts;
  for (const Values& part : grad_parts()) parts.push_back({part.x, part.n});
  device_.add_sums_of_squares(parts, sums_);
  double total = 0.0;
  device_.to_host(&total, sums_, sizeof total);
  return total;
}

void DeviceStep::update(const DeviceUpdate& u, double grad_scale) {
  if (!loaded_) throw std::logic_error("DeviceStep: update() before load()");
  using Kind = DeviceUpdate::Kind;
  const bool one_state = u.kind == Kind::lion || u.kind == Kind::adagrad || u.kind == Kind::rmsprop;
  const size_t states = u.kind == Kind::sgd ? (u.sgd.momentum != 0.0f ? 1u : 0u) : one_state ? 1u : 2u;
  if (states != state_.size()) throw std::logic_error("DeviceStep: the update's state differs from the buffers held");
  std::vector<const Tensor*> mine;  // the tensors with a part to update
  for (const Tensor& t : tensors_)
    if (t.count > 0) mine.push_back(&t);
  if (grad_scale != 1.0) device_.rescale_all(grad_parts(), grad_scale);
  auto p_of = [&](const Tensor& t) {
    return master_ ? master_ + t.offset : gathered_ ? gathered_->partition() + t.offset : param(t) + t.from;
  };
  auto g_of = [&](const Tensor& t) { return grad_part(t); };
  auto state_at = [&](size_t k, const Tensor& t) { return state_[k] + t.offset; };
  if (u.kind == Kind::lamb) {  // the moments and each tensor's sums, then its trust ratio on the host
    std::vector<backend::Device::LambTensor> lamb;
    lamb.reserve(mine.size());
    for (const Tensor* t : mine) lamb.push_back({p_of(*t), g_of(*t), state_at(0, *t), state_at(1, *t), t->count});
    device_.lamb_moments(lamb, u.lamb, sums_);
    std::vector<double> mine_sums(2 * mine.size()), sums(2 * tensors_.size(), 0.0);
    device_.to_host(mine_sums.data(), sums_, mine_sums.size() * sizeof(double));
    for (size_t i = 0; i < mine.size(); ++i) {  // at each tensor's place (those without a part: zeros)
      const auto at = static_cast<size_t>(mine[i] - tensors_.data());
      sums[2 * at] = mine_sums[2 * i];
      sums[2 * at + 1] = mine_sums[2 * i + 1];
    }
    if (u.reduce_sums) u.reduce_sums(sums);  // every rank lists every tensor, in one order
    std::vector<float> scales;
    scales.reserve(mine.size());
    for (const Tensor* t : mine) {
      const auto at = static_cast<size_t>(t - tensors_.data());
      scales.push_back(u.lamb_step_size * u.trust_ratio(sums[2 * at], sums[2 * at + 1]));
    }
    device_.lamb_apply(lamb, u.lamb, scales);
  } else if (u.kind == Kind::sgd) {  // every tensor in one call, as Adam's
    std::vector<backend::Device::SgdTensor> sgd;
    sgd.reserve(mine.size());
    for (const Tensor* t : mine) sgd.push_back({p_of(*t), g_of(*t), states ? state_at(0, *t) : nullptr, t->count});
    device_.sgd_steps(sgd, u.sgd);
  } else if (one_state) {  // likewise
    std::vector<backend::Device::OneStateTensor> tensors;
    tensors.reserve(mine.size());
    for (const Tensor* t : mine) tensors.push_back({p_of(*t), g_of(*t), state_at(0, *t), t->count});
    if (u.kind == Kind::lion)
      device_.lion_steps(tensors, u.lion);
    else if (u.kind == Kind::adagrad)
      device_.adagrad_steps(tensors, u.adagrad);
    else
      device_.rmsprop_steps(tensors, u.rmsprop);
  } else {  // every tensor in one call: one launch on a GPU
    std::vector<backend::Device::AdamTensor> adam;
    adam.reserve(mine.size());
    for (const Tensor* t : mine) adam.push_back({p_of(*t), g_of(*t), state_at(0, *t), state_at(1, *t), t->count});
    device_.adam_steps(adam, u.adam, u.kind == Kind::adamw);
  }
  if (gathered_) {  // the partition the layers' gathers read (fp32: the master itself; else its 16-bit values)
    if (master_) gathered_->take_master(master_);
    gathered_->updated();
    return;
  }
  if (master_) {  // the parameters the layers read: the master's values at 16-bit precision
    std::vector<RoundTensor> params;
    for (const Tensor* t : mine) params.push_back({param(*t) + t->from, master_ + t->offset, t->count});
    device_.round_into(*rounding_, params);
  }
  for (size_t k = 0; partitioned_ && k < units_.size(); ++k)
    if (units_[k].chunk > 0) finish_exchange(Exchange::gather_params, k, 0, *start_exchange(Exchange::gather_params, k, 0));
  for (const Tie& tie : ties_) {
    const ds_tensor& to = layers_.device_params(tie.layer)[tie.index];
    device_.copy_within(to.data, layers_.device_params(tie.owner_layer)[tie.owner_index].data,
                        static_cast<size_t>(shape_numel(to.shape)) * sizeof(float));
  }
}

// A unit's exchange through the flat buffers of a slot: the tensors' values into the collective's input
// (zeros where the unit is padded, zero_gaps), the collective on the group's stream, then its output back into the
// tensors. All-reduce (replicas): every tensor's gradients whole into the unit, in place, and back whole.
// Reduce-scatter: every tensor's gradients whole into the unit, the sums of
// this rank's parts back (the other parts keep this rank's own sums, which nothing reads), or with
// partition_grads added into the partition (rounded after, as the host's 16-bit partition holds them).
// All-gather: this rank's updated parts into its chunk, every rank's parts of every tensor back. Where the
// values are 16-bit (the parameters in 16-bit training, the gradients with 16-bit accumulation) they cross
// as 16-bit values, narrowed into the buffers (which have room for fp32) and widened out of them, as the
// host and DeepSpeed move them: half the bytes, and the collective's sums rounded as the host's are.
std::unique_ptr<Work> DeviceStep::start_exchange(Exchange exchange, size_t unit, size_t slot) {
  const bool gather = exchange == Exchange::gather_params;
  const std::optional<amp::Half> half = moved_as(exchange);
  const Unit& u = units_[unit];
  float* in = gather ? chunk_buffer_[slot] : unit_buffer_[slot];
  std::vector<Move> moves;  // the tensors' values into the buffer, in one call
  std::vector<std::pair<size_t, size_t>> written;  // [begin, end) of the buffer's elements that they fill
  for (const Tensor* t : unit_tensors_[unit]) {
    const Copy c = gather ? part(exchange, *t, slot) : whole(exchange, *t, slot);
    if (c.count == 0) continue;
    moves.push_back({half ? static_cast<void*>(half_at(in, c.buffer)) : c.buffer, c.tensor, c.count});
    written.emplace_back(static_cast<size_t>(c.buffer - in), static_cast<size_t>(c.buffer - in) + c.count);
  }
  zero_gaps(in, gather ? u.chunk : u.padded, half ? sizeof(uint16_t) : sizeof(float), std::move(written));
  if (half) device_.narrow_all(*half, moves);
  else device_.copy_all(moves);
  const DataType type = zero::collective_type(half);
  switch (exchange) {
    case Exchange::all_reduce_grads: return group_->allreduce_async(in, u.padded, type, ReduceOp::Sum);
    case Exchange::reduce_scatter_grads: return group_->reduce_scatter_async(in, chunk_buffer_[slot], u.chunk, type, ReduceOp::Sum);
    case Exchange::gather_params: return group_->allgather_async(in, unit_buffer_[slot], u.chunk, type);
  }
  throw std::logic_error("DeviceStep: an unknown exchange");
}

// Zeros where the tensors leave the buffer's first `length` elements unwritten (the unit's padding), which
// the collective reads too; not the whole buffer, which would write the unit twice.
void DeviceStep::zero_gaps(float* buffer, size_t length, size_t element, std::vector<std::pair<size_t, size_t>> written) {
  std::sort(written.begin(), written.end());
  size_t done = 0;  // the elements before it are written or zeroed
  written.emplace_back(length, length);
  for (const auto& [begin, end] : written) {
    if (begin > done) device_.zero(reinterpret_cast<std::byte*>(buffer) + done * element, (begin - done) * element);
    done = std::max(done, end);
  }
}

std::optional<amp::Half> DeviceStep::moved_as(Exchange exchange) const {
  return exchange == Exchange::gather_params ? rounding_ : grad_rounding_;
}

uint16_t* DeviceStep::half_at(float* buffer, const float* place) {
  return reinterpret_cast<uint16_t*>(buffer) + (place - buffer);
}

void DeviceStep::finish_exchange(Exchange exchange, size_t unit, size_t slot, Work& work) {
  work.wait();  // later ops are issued after: they see the output
  const bool scatter = exchange == Exchange::reduce_scatter_grads;
  const std::optional<amp::Half> half = moved_as(exchange);
  float* out = scatter ? chunk_buffer_[slot] : unit_buffer_[slot];  // (the all-reduce's: in place)
  if (scatter && partition_grads_) {
    const Unit& u = units_[unit];
    const float* sums = out;
    if (half) {  // widened into the unit's buffer, free once the sum is done
      device_.widen(*half, half_at(out, out), unit_buffer_[slot], u.chunk);
      sums = unit_buffer_[slot];
    }
    device_.accumulate(partition_ + u.part_offset, sums, u.chunk);
    if (half) device_.round_to(*half, partition_ + u.part_offset, u.chunk);
    return;
  }
  std::vector<Move> moves;  // the buffer's values into the tensors, in one call
  for (const Tensor* t : unit_tensors_[unit]) {
    const Copy c = scatter ? part(exchange, *t, slot) : whole(exchange, *t, slot);
    if (c.count > 0) moves.push_back({c.tensor, half ? static_cast<const void*>(half_at(out, c.buffer)) : c.buffer, c.count});
  }
  if (half) device_.widen_all(*half, moves);
  else device_.copy_all(moves);
}

DeviceStep::Copy DeviceStep::whole(Exchange exchange, const Tensor& t, size_t slot) const {
  return {unit_buffer_[slot] + t.in_unit, values(exchange, t), t.size};
}

DeviceStep::Copy DeviceStep::part(Exchange exchange, const Tensor& t, size_t slot) const {
  if (t.count == 0) return {};  // this rank updates nothing of it
  const size_t chunk_begin = static_cast<size_t>(group_->rank()) * units_[t.unit].chunk;
  return {chunk_buffer_[slot] + (t.in_unit + t.from - chunk_begin), values(exchange, t) + t.from, t.count};
}

void DeviceStep::store(float* master, std::span<const StateView> state,
                       const std::function<void(const Tensor& tensor, const float* values)>& params) {
  if (!loaded_) return;  // the host's values are the latest
  if (master_) device_.to_host(master, master_, n_ * sizeof(float));
  for (size_t k = 0; k < state_.size(); ++k) device_.to_host(state[k].data, state_[k], n_ * sizeof(float));
  if (gathered_) return;
  std::vector<float> values;
  for (const Tensor& t : tensors_) {
    values.resize(t.size);
    device_.to_host(values.data(), param(t), values.size() * sizeof(float));
    params(t, values.data());
  }
}

}  // namespace ds
