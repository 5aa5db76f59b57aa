// DeviceStep (device_step.h): the gradients' reduction, the norm and the optimizer's update over the layers'
// device buffers, and the partitioned parameters' gather.
#include "engine/device_step.h"

#include <algorithm>
#include <stdexcept>

namespace ds {

DeviceStep::DeviceStep(backend::Device& device, DeviceLayers& layers, std::vector<Tensor> tensors,
                       std::vector<Tie> ties, size_t n, size_t state_buffers, std::optional<amp::Half> rounding,
                       std::optional<amp::Half> grad_rounding, ProcessGroup* group, std::vector<Unit> units)
    : device_(device), layers_(layers), tensors_(std::move(tensors)), ties_(std::move(ties)), n_(n), rounding_(rounding),
      grad_rounding_(grad_rounding), group_(group), units_(std::move(units)) {
  if (rounding_) master_ = static_cast<float*>(allocate(n_ * sizeof(float)));
  for (size_t k = 0; k < state_buffers; ++k) state_.push_back(static_cast<float*>(allocate(n_ * sizeof(float))));
  sums_ = static_cast<double*>(allocate(std::max<size_t>(1, 2 * tensors_.size()) * sizeof(double)));
  size_t padded = 0, chunk = 0;
  for (const Unit& u : units_) {
    padded = std::max(padded, u.padded);
    chunk = std::max(chunk, u.chunk);
  }
  if (!units_.empty()) {
    unit_buffer_ = static_cast<float*>(allocate(padded * sizeof(float)));
    chunk_buffer_ = static_cast<float*>(allocate(chunk * sizeof(float)));
  }
}

DeviceStep::~DeviceStep() {
  for (void* p : owned_) {
    try {
      device_.release(p);
    } catch (...) {  // a device that failed: that error was the one reported
    }
  }
}

void* DeviceStep::allocate(size_t bytes) {
  owned_.reserve(owned_.size() + 1);
  owned_.push_back(device_.allocate(bytes > 0 ? bytes : 1));
  return owned_.back();
}

float* DeviceStep::param(const Tensor& t) const { return static_cast<float*>(layers_.device_params(t.layer)[t.index].data); }

float* DeviceStep::grad(const Tensor& t) const {
  return static_cast<float*>(layers_.device_grads(t.layer)[t.index].data);
}

void DeviceStep::load(const float* master, std::span<const StateView> state) {
  if ((master != nullptr) != (master_ != nullptr) || state.size() != state_.size())
    throw std::logic_error("DeviceStep: load() with another master or state than planned");
  if (master_) device_.to_device(master_, master, n_ * sizeof(float));
  for (size_t k = 0; k < state_.size(); ++k) {
    if (state[k].storage != amp::Storage::F32 || state[k].size != n_)
      throw std::logic_error("DeviceStep: the optimizer's state is not fp32 [n]");
    device_.to_device(state_[k], state[k].data, n_ * sizeof(float));
  }
  loaded_ = true;
}

void DeviceStep::round_gradients() {
  if (grad_rounding_)
    for (const Tensor& t : tensors_) device_.round_to(*grad_rounding_, grad(t), t.size);
}

void DeviceStep::finish_gradients(double pre, double post) {
  for (const Tie& tie : ties_) {  // the owners' sums change: with 16-bit accumulation, rounded again
    const ds_tensor& from = layers_.device_grads(tie.layer)[tie.index];
    const size_t size = static_cast<size_t>(shape_numel(from.shape));
    float* owner = static_cast<float*>(layers_.device_grads(tie.owner_layer)[tie.owner_index].data);
    device_.accumulate(owner, static_cast<const float*>(from.data), size);
    if (grad_rounding_) device_.round_to(*grad_rounding_, owner, size);
  }
  if (group_ == nullptr || group_->size() == 1) return;
  if (pre != 1.0)
    for (const Tensor& t : tensors_) device_.rescale(grad(t), t.size, pre);
  if (units_.empty()) {  // replicas: every rank needs every sum
    device_.synchronize();  // the group's stream reads what the ops wrote
    std::vector<std::unique_ptr<Work>> sums;
    for (const Tensor& t : tensors_) sums.push_back(group_->allreduce_async(grad(t), t.size, DataType::F32, ReduceOp::Sum));
    for (auto& work : sums) work->wait();  // later ops are issued after: they see the sums
  } else {
    exchange_units(Exchange::reduce_scatter_grads, &DeviceStep::grad);
  }
  for (const Tensor& t : tensors_) {  // the parts this rank updates (replicas: the whole tensors)
    if (t.count == 0) continue;
    if (post != 1.0) device_.rescale(grad(t) + t.from, t.count, post);
    if (grad_rounding_) device_.round_to(*grad_rounding_, grad(t) + t.from, t.count);
  }
}

double DeviceStep::sum_squares() {
  device_.zero(sums_, sizeof(double));
  for (const Tensor& t : tensors_)
    if (t.count > 0) device_.add_sum_squares(grad(t) + t.from, t.count, sums_);
  double total = 0.0;
  device_.to_host(&total, sums_, sizeof total);
  return total;
}

void DeviceStep::update(const DeviceUpdate& u, double grad_scale) {
  if (!loaded_) throw std::logic_error("DeviceStep: update() before load()");
  using Kind = DeviceUpdate::Kind;
  const size_t states = u.kind == Kind::sgd ? (u.sgd.momentum != 0.0f ? 1u : 0u) : 2u;
  if (states != state_.size()) throw std::logic_error("DeviceStep: the update's state differs from the buffers held");
  std::vector<const Tensor*> mine;  // the tensors with a part to update
  for (const Tensor& t : tensors_)
    if (t.count > 0) mine.push_back(&t);
  if (grad_scale != 1.0)
    for (const Tensor* t : mine) device_.rescale(grad(*t) + t->from, t->count, grad_scale);
  auto p_of = [&](const Tensor& t) { return master_ ? master_ + t.offset : param(t) + t.from; };
  auto g_of = [&](const Tensor& t) { return grad(t) + t.from; };
  auto state_at = [&](size_t k, const Tensor& t) { return state_[k] + t.offset; };
  if (u.kind == Kind::lamb) {  // the moments and the sums, then each tensor's trust ratio on the host
    device_.zero(sums_, 2 * tensors_.size() * sizeof(double));
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      if (t.count > 0) device_.lamb_moments(p_of(t), g_of(t), state_at(0, t), state_at(1, t), t.count, u.lamb, sums_ + 2 * i);
    }
    std::vector<double> sums(2 * tensors_.size());
    device_.to_host(sums.data(), sums_, sums.size() * sizeof(double));
    if (u.reduce_sums) u.reduce_sums(sums);  // every rank lists every tensor, in one order
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      if (t.count > 0)
        device_.lamb_apply(p_of(t), state_at(0, t), state_at(1, t), t.count, u.lamb,
                           u.lamb_step_size * u.trust_ratio(sums[2 * i], sums[2 * i + 1]));
    }
  } else {
    for (const Tensor* t : mine) {
      if (u.kind == Kind::sgd) device_.sgd_step(p_of(*t), g_of(*t), states ? state_at(0, *t) : nullptr, t->count, u.sgd);
      else device_.adam_step(p_of(*t), g_of(*t), state_at(0, *t), state_at(1, *t), t->count, u.adam, u.kind == Kind::adamw);
    }
  }
  if (master_)  // the parameters the layers read: the master's values at 16-bit precision
    for (const Tensor* t : mine) {
      device_.copy_within(param(*t) + t->from, master_ + t->offset, t->count * sizeof(float));
      device_.round_to(*rounding_, param(*t) + t->from, t->count);
    }
  if (!units_.empty()) exchange_units(Exchange::gather_params, &DeviceStep::param);
  for (const Tie& tie : ties_) {
    const ds_tensor& to = layers_.device_params(tie.layer)[tie.index];
    device_.copy_within(to.data, layers_.device_params(tie.owner_layer)[tie.owner_index].data,
                        static_cast<size_t>(shape_numel(to.shape)) * sizeof(float));
  }
}

// Unit by unit through the flat buffers, the frame of both partitioned exchanges: the tensors' values
// into the collective's input (zeros where the unit is padded), the collective, its output back into the
// tensors. Reduce-scatter: every tensor whole into the unit, the sums of this rank's parts back (the other
// parts keep this rank's own sums, which nothing reads). All-gather: this rank's parts into its chunk,
// every rank's parts of every tensor back.
void DeviceStep::exchange_units(Exchange exchange, float* (DeviceStep::*values)(const Tensor&) const) {
  struct Copy {
    float* buffer;
    float* tensor;
    size_t count;
  };
  const bool scatter = exchange == Exchange::reduce_scatter_grads;
  float* in = scatter ? unit_buffer_ : chunk_buffer_;
  float* out = scatter ? chunk_buffer_ : unit_buffer_;
  const size_t rank = static_cast<size_t>(group_->rank());
  for (size_t k = 0; k < units_.size(); ++k) {
    const Unit& unit = units_[k];
    if (unit.chunk == 0) continue;
    const auto whole = [&](const Tensor& t) { return Copy{unit_buffer_ + t.in_unit, (this->*values)(t), t.size}; };
    const auto part = [&](const Tensor& t) {  // none where this rank updates nothing of it
      if (t.count == 0) return Copy{nullptr, nullptr, 0};
      return Copy{chunk_buffer_ + (t.in_unit + t.from - rank * unit.chunk), (this->*values)(t) + t.from, t.count};
    };
    device_.zero(in, (scatter ? unit.padded : unit.chunk) * sizeof(float));
    for (const Tensor& t : tensors_)
      if (t.unit == k)
        if (const Copy c = scatter ? whole(t) : part(t); c.count > 0)
          device_.copy_within(c.buffer, c.tensor, c.count * sizeof(float));
    device_.synchronize();  // the group's stream reads the input
    (scatter ? group_->reduce_scatter_async(in, out, unit.chunk, DataType::F32, ReduceOp::Sum)
             : group_->allgather_async(in, out, unit.chunk, DataType::F32))
        ->wait();  // later ops are issued after: they see the output
    for (const Tensor& t : tensors_)
      if (t.unit == k)
        if (const Copy c = scatter ? part(t) : whole(t); c.count > 0)
          device_.copy_within(c.tensor, c.buffer, c.count * sizeof(float));
  }
}

void DeviceStep::store(float* master, std::span<const StateView> state,
                       const std::function<void(const Tensor& tensor, const float* values)>& params) {
  if (!loaded_) return;  // the host's values are the latest
  if (master_) device_.to_host(master, master_, n_ * sizeof(float));
  for (size_t k = 0; k < state_.size(); ++k) device_.to_host(state[k].data, state_[k], n_ * sizeof(float));
  std::vector<float> values;
  for (const Tensor& t : tensors_) {
    values.resize(t.size);
    device_.to_host(values.data(), param(t), values.size() * sizeof(float));
    params(t, values.data());
  }
}

}  // namespace ds
