// DeviceStep (device_step.h): the norm and the optimizer's update over the layers' device buffers.
#include "engine/device_step.h"

#include <stdexcept>

namespace ds {

DeviceStep::DeviceStep(backend::Device& device, DeviceLayers& layers, std::vector<Tensor> tensors,
                       std::vector<Tie> ties, size_t n, size_t state_buffers, std::optional<amp::Half> rounding)
    : device_(device), layers_(layers), tensors_(std::move(tensors)), ties_(std::move(ties)), n_(n), rounding_(rounding) {
  if (rounding_) master_ = static_cast<float*>(allocate(n_ * sizeof(float)));
  for (size_t k = 0; k < state_buffers; ++k) state_.push_back(static_cast<float*>(allocate(n_ * sizeof(float))));
  sums_ = static_cast<double*>(allocate(std::max<size_t>(1, 2 * tensors_.size()) * sizeof(double)));
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

float* DeviceStep::param(const Tensor& t) { return static_cast<float*>(layers_.device_params(t.layer)[t.index].data); }

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

void DeviceStep::finish_gradients(ProcessGroup* group, double pre, double post) {
  for (const Tie& tie : ties_) {
    const ds_tensor& from = layers_.device_grads(tie.layer)[tie.index];
    device_.accumulate(static_cast<float*>(layers_.device_grads(tie.owner_layer)[tie.owner_index].data),
                       static_cast<const float*>(from.data), static_cast<size_t>(shape_numel(from.shape)));
  }
  if (group == nullptr || group->size() == 1) return;
  if (pre != 1.0)
    for (const Tensor& t : tensors_) device_.rescale(grad(t), t.size, pre);
  device_.synchronize();  // the group's stream reads what the ops wrote
  std::vector<std::unique_ptr<Work>> sums;
  for (const Tensor& t : tensors_) sums.push_back(group->allreduce_async(grad(t), t.size, DataType::F32, ReduceOp::Sum));
  for (auto& work : sums) work->wait();  // later ops are issued after: they see the sums
  if (post != 1.0)
    for (const Tensor& t : tensors_) device_.rescale(grad(t), t.size, post);
}

double DeviceStep::sum_squares() {
  device_.zero(sums_, sizeof(double));
  for (const Tensor& t : tensors_) device_.add_sum_squares(grad(t), t.size, sums_);
  double total = 0.0;
  device_.to_host(&total, sums_, sizeof total);
  return total;
}

void DeviceStep::update(const DeviceUpdate& u, double grad_scale) {
  if (!loaded_) throw std::logic_error("DeviceStep: update() before load()");
  using Kind = DeviceUpdate::Kind;
  const size_t states = u.kind == Kind::sgd ? (u.sgd.momentum != 0.0f ? 1u : 0u) : 2u;
  if (states != state_.size()) throw std::logic_error("DeviceStep: the update's state differs from the buffers held");
  for (const Tensor& t : tensors_) {
    if (grad_scale != 1.0) device_.rescale(grad(t), t.size, grad_scale);
  }
  auto p_of = [&](const Tensor& t) { return master_ ? master_ + t.offset : param(t); };
  auto state_at = [&](size_t k, const Tensor& t) { return state_[k] + t.offset; };
  if (u.kind == Kind::lamb) {  // the moments and the sums, then each tensor's trust ratio on the host
    device_.zero(sums_, 2 * tensors_.size() * sizeof(double));
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      device_.lamb_moments(p_of(t), grad(t), state_at(0, t), state_at(1, t), t.size, u.lamb, sums_ + 2 * i);
    }
    std::vector<double> sums(2 * tensors_.size());
    device_.to_host(sums.data(), sums_, sums.size() * sizeof(double));
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      device_.lamb_apply(p_of(t), state_at(0, t), state_at(1, t), t.size, u.lamb,
                         u.lamb_step_size * u.trust_ratio(sums[2 * i], sums[2 * i + 1]));
    }
  } else {
    for (const Tensor& t : tensors_) {
      if (u.kind == Kind::sgd) device_.sgd_step(p_of(t), grad(t), states ? state_at(0, t) : nullptr, t.size, u.sgd);
      else device_.adam_step(p_of(t), grad(t), state_at(0, t), state_at(1, t), t.size, u.adam, u.kind == Kind::adamw);
    }
  }
  if (master_)  // the parameters the layers read: the master's values at 16-bit precision
    for (const Tensor& t : tensors_) {
      device_.copy_within(param(t), master_ + t.offset, t.size * sizeof(float));
      device_.round_to(*rounding_, param(t), t.size);
    }
  for (const Tie& tie : ties_) {
    const ds_tensor to = layers_.device_params(tie.layer)[tie.index];  // (a copy: the views come by value)
    device_.copy_within(to.data, layers_.device_params(tie.owner_layer)[tie.owner_index].data,
                 static_cast<size_t>(shape_numel(to.shape)) * sizeof(float));
  }
}

void DeviceStep::store(float* master, std::span<const StateView> state) {
  if (!loaded_) return;  // the host's values are the latest
  if (master_) device_.to_host(master, master_, n_ * sizeof(float));
  else
    for (const Tensor& t : tensors_) device_.to_host(t.host_params, param(t), t.size * sizeof(float));
  for (size_t k = 0; k < state_.size(); ++k) device_.to_host(state[k].data, state_[k], n_ * sizeof(float));
}

}  // namespace ds
