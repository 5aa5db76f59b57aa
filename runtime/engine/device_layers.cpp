// DeviceLayers (device_layers.h): staging copies and the plugin's calls on the device.
#include "engine/device_layers.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ds {
namespace {

size_t bytes_of(const ds_shape& s) { return static_cast<size_t>(shape_numel(s)) * sizeof(float); }

}  // namespace

DeviceLayers::DeviceLayers(backend::Device& device, const Plugin& plugin, const std::vector<LayerShape>& layers,
                           bool shared_workspace, ParamSource params, bool keep_grads, const ds_dataset_info& data,
                           int64_t micro_batch, size_t prediction_floats, std::optional<amp::Half> rounding)
    : device_(device), plugin_(plugin), layers_(layers), shared_workspace_(shared_workspace), source_(params),
      keep_grads_(keep_grads),
      data_(data), micro_batch_(micro_batch), rounding_(rounding) {
  if (&plugin.backend() != device.table())
    throw std::logic_error("DeviceLayers: the plugin was created on another backend");
  size_t max_act = 0, max_ws = 0, max_params = 0, shared_floats = 0;
  for (const LayerShape& l : layers_)
    if (keep_grads && l.shared_grads_at) shared_floats = std::max(shared_floats, *l.shared_grads_at + l.param_floats);
  const Buffer shared_grads = shared_floats > 0 ? allocate(shared_floats * sizeof(float), &MemoryReport::grads) : Buffer{};
  for (const LayerShape& l : layers_) {
    outputs_.push_back(allocate(bytes_of(l.output), &MemoryReport::activations));
    if (!shared_workspace_) workspaces_.push_back(allocate(l.workspace_bytes, &MemoryReport::workspace));
    if (params == ParamSource::kept) params_.push_back(allocate(l.param_floats * sizeof(float), &MemoryReport::params));
    if (keep_grads)
      grads_.push_back(l.shared_grads_at ? Buffer{static_cast<float*>(shared_grads.data) + *l.shared_grads_at,
                                                  l.param_floats * sizeof(float)}
                                         : allocate(l.param_floats * sizeof(float), &MemoryReport::grads));
    max_ws = std::max(max_ws, l.workspace_bytes);
    max_act = std::max({max_act, bytes_of(l.input), bytes_of(l.output)});
    max_params = std::max(max_params, l.param_floats);
  }
  if (shared_workspace_) workspaces_.push_back(allocate(max_ws, &MemoryReport::workspace));
  if (params == ParamSource::staged)  // two, so that a layer's upload overlaps the previous layer's ops
    for (int k = 0; k < 2; ++k) params_.push_back(allocate(max_params * sizeof(float), &MemoryReport::params));
  params_kept_.assign(params == ParamSource::staged ? 0 : layers_.size(), false);
  kept_views_.resize(params_kept_.size());
  halves_.resize(params_kept_.size());
  widenings_.resize(params_kept_.size());
  upload_tickets_.assign(params_kept_.size(), 0);
  if (!keep_grads)  // two, so that a layer's download overlaps the next one's backward
    for (int k = 0; k < 2; ++k) grads_.push_back(allocate(max_params * sizeof(float), &MemoryReport::grads));
  grad_tickets_.assign(grads_.size(), 0);
  kept_grad_views_.resize(keep_grads ? layers_.size() : 0);
  layer_tickets_.assign(layers_.size(), 0);
  grad_a_ = allocate(max_act, &MemoryReport::activations);
  grad_b_ = allocate(max_act, &MemoryReport::activations);
  input_ = allocate(bytes_of(layers_.front().input), &MemoryReport::activations);
  ds_shape target = data.target_shape;
  target.ndim += 1;
  for (int d = target.ndim - 1; d > 0; --d) target.dims[d] = target.dims[d - 1];
  target.dims[0] = micro_batch;
  target_ = allocate(bytes_of(target), &MemoryReport::activations);
  predictions_ = allocate(prediction_floats * sizeof(float), &MemoryReport::activations);
  loss_grad_ = allocate(sizeof(float), &MemoryReport::activations);
}

DeviceLayers::~DeviceLayers() {
  try {
    device_.wait_copies(std::max(last_ticket_, last_upload_));  // before the host buffers they use go
  } catch (...) {  // as below
  }
  for (void* p : pinned_) {
    try {
      device_.unpin_host(p);
    } catch (...) {  // as below
    }
  }
  for (const Buffer& b : owned_) {
    try {
      device_.release(b.data);
    } catch (...) {  // a device that failed: that error was the one reported
    }
  }
}

DeviceLayers::Buffer DeviceLayers::allocate(size_t bytes, size_t MemoryReport::*kind) {
  owned_.reserve(owned_.size() + 1);
  Buffer b{device_.allocate(bytes > 0 ? bytes : 1), bytes};
  owned_.push_back(b);
  held_.*kind += bytes;
  return b;
}

void DeviceLayers::release(Buffer& buffer, size_t MemoryReport::*kind) {
  const auto at = std::find_if(owned_.begin(), owned_.end(), [&](const Buffer& b) { return b.data == buffer.data; });
  if (at == owned_.end()) throw std::logic_error("DeviceLayers: release() of a buffer it does not own");
  device_.release(buffer.data);  // (the device's release waits for the ops that use it)
  held_.*kind -= buffer.bytes;
  owned_.erase(at);
  buffer = {};
}

std::vector<ds_tensor> DeviceLayers::views_in(const std::vector<ds_tensor>& host, const Buffer& buffer) const {
  std::vector<ds_tensor> out;
  size_t at = 0;
  for (const ds_tensor& t : host) {
    const size_t bytes = bytes_of(t.shape);
    if (at + bytes > buffer.bytes) throw std::logic_error("DeviceLayers: a layer's tensors exceed their device buffer");
    out.push_back(ds_tensor{static_cast<char*>(buffer.data) + at, DS_F32, t.shape, device_.table()->device});
    at += (bytes + 15) / 16 * 16;
  }
  return out;
}

uint16_t* DeviceLayers::half_beside(Buffer& halves, const Buffer& fp32, const void* view) {
  if (halves.data == nullptr) halves = allocate(fp32.bytes / 2, &MemoryReport::params);
  const size_t at = static_cast<size_t>(static_cast<const char*>(view) - static_cast<const char*>(fp32.data));
  return reinterpret_cast<uint16_t*>(static_cast<char*>(halves.data) + at / 2);
}

std::vector<ds_tensor> DeviceLayers::stage(const std::vector<ds_tensor>& host, const Buffer& staging,
                                           const std::vector<bool>* zeroed) {
  std::vector<ds_tensor> out = views_in(host, staging);
  for (size_t k = 0; k < host.size(); ++k) {
    if (host[k].dtype != DS_F32) throw std::logic_error("DeviceLayers: 16-bit tensors are uploaded by upload_staged");
    if (zeroed && (*zeroed)[k]) device_.zero(out[k].data, bytes_of(host[k].shape));
    else device_.to_device(out[k].data, host[k].data, bytes_of(host[k].shape));
  }
  return out;
}

std::vector<ds_tensor> DeviceLayers::upload_staged(const std::vector<ds_tensor>& host) {
  const size_t b = next_param_staging_;
  next_param_staging_ = 1 - b;
  std::vector<ds_tensor> out = views_in(host, params_[b]);
  std::vector<Widening> widenings;
  for (size_t k = 0; k < host.size(); ++k) {
    const size_t n = static_cast<size_t>(shape_numel(host[k].shape));
    if (host[k].dtype == DS_F32) {
      device_.to_device_after(staging_reads_[b], out[k].data, host[k].data, n * sizeof(float));
      continue;
    }
    // 16-bit parameters: their bits cross, and the device widens them into the fp32 view
    uint16_t* half = half_beside(staged_halves_[b], params_[b], out[k].data);
    device_.to_device_after(staging_reads_[b], half, host[k].data, n * sizeof(uint16_t));
    widenings.push_back({host[k].dtype == DS_BF16 ? amp::Half::BF16 : amp::Half::F16, half,
                         static_cast<float*>(out[k].data), n});
  }
  staged_upload_ = device_.uploads_issued();
  staged_buffer_ = b;
  device_.ops_after_copies(staged_upload_);
  for (const Widening& w : widenings) device_.widen(w.type, w.half, w.out, w.n);
  return out;
}

void DeviceLayers::finish_staged_call() {
  if (staged_upload_ == 0) return;
  staging_reads_[staged_buffer_] = device_.ops_issued();  // this call's ops were the buffer's last readers
  device_.wait_copies(staged_upload_);  // the engine may release the host values now
  staged_upload_ = 0;
}

std::vector<ds_tensor> DeviceLayers::layer_params(size_t i, const std::vector<ds_tensor>* host) {
  if (holds_params(i)) {
    device_.ops_after_copies(upload_tickets_[i]);  // prefetched: the ops wait for the upload
    for (const Widening& w : widenings_[i]) device_.widen(w.type, w.half, w.out, w.n);
    widenings_[i].clear();
    if (!keep_uploads_ && halves_[i].data != nullptr) release(halves_[i], &MemoryReport::params);  // (after the widening)
    return kept_views_[i];
  }
  if (host == nullptr || source_ == ParamSource::provided)
    throw std::logic_error("DeviceLayers: a layer's parameters are neither given nor on the device");
  if (source_ == ParamSource::staged) return upload_staged(*host);
  kept_views_[i] = stage(*host, params_[i]);
  params_kept_[i] = true;
  return kept_views_[i];
}

const std::vector<ds_tensor>& DeviceLayers::device_params(size_t i) {
  layer_params(i, nullptr);  // waits for the upload (and widens) when one is pending
  return kept_views_[i];
}

void DeviceLayers::forget_params() { std::fill(params_kept_.begin(), params_kept_.end(), false); }

void DeviceLayers::provide_params(size_t i, std::vector<ds_tensor> views) {
  if (source_ != ParamSource::provided) throw std::logic_error("DeviceLayers: provide_params without provided parameters");
  params_kept_[i] = true;
  kept_views_[i] = std::move(views);
}

void DeviceLayers::withdraw_params(size_t i) {
  params_kept_[i] = false;
  kept_views_[i].clear();
}

void DeviceLayers::prefetch_params(size_t i, const std::vector<ds_tensor>& host) {
  if (source_ != ParamSource::kept) throw std::logic_error("DeviceLayers: prefetch_params without kept parameters");
  kept_views_[i] = views_in(host, params_[i]);
  widenings_[i].clear();
  for (size_t k = 0; k < host.size(); ++k) {
    const size_t n = static_cast<size_t>(shape_numel(host[k].shape));
    if (host[k].dtype == DS_F32) {
      device_.to_device_async(kept_views_[i][k].data, host[k].data, n * sizeof(float));
      continue;
    }
    // 16 bits cross; the device widens them into the fp32 buffer before the layer's first op
    uint16_t* half = half_beside(halves_[i], params_[i], kept_views_[i][k].data);
    device_.to_device_async(half, host[k].data, n * sizeof(uint16_t));
    const amp::Half type = host[k].dtype == DS_BF16 ? amp::Half::BF16 : amp::Half::F16;
    widenings_[i].push_back({type, half, static_cast<float*>(kept_views_[i][k].data), n});
  }
  last_upload_ = upload_tickets_[i] = device_.copies_issued();
  params_kept_[i] = true;
}

bool DeviceLayers::pin(void* p, size_t bytes, std::string& why) {
  if (p == nullptr || bytes == 0) return true;  // nothing to pin
  pinned_.reserve(pinned_.size() + 1);
  if (!device_.pin_host(p, bytes, why)) return false;
  pinned_.push_back(p);
  return true;
}

void DeviceLayers::unpin(void* p) {
  const auto at = std::find(pinned_.begin(), pinned_.end(), p);
  if (at == pinned_.end()) return;
  device_.unpin_host(p);
  pinned_.erase(at);
}

ds_batch DeviceLayers::device_batch(const ds_batch& batch) {
  ds_batch out{&input_t_, &target_t_, batch.step, batch.micro_step, nullptr};
  if (batch.predictions != nullptr) out.predictions = &predictions_t_;
  return out;
}

ds_tensor DeviceLayers::input_of(size_t i, const ds_batch& device) const {
  if (i == 0) return *device.input;
  ds_shape shape = layers_[i].input;
  shape.dims[0] = input_t_.shape.dims[0];  // the rows under way
  return ds_tensor{outputs_[i - 1].data, DS_F32, shape, device_.table()->device};
}

void* DeviceLayers::workspace(size_t i) const { return shared_workspace_ ? workspaces_[0].data : workspaces_[i].data; }

void DeviceLayers::forward(size_t i, const std::vector<ds_tensor>* params, const ds_shape& output,
                           const ds_batch& batch, float* host_loss, bool recompute) {
  const ds_device_type dev = device_.table()->device;
  if (i == 0 && !recompute) {  // the micro-batch (and, for predictions, the rows under way) to the device
    device_.to_device(input_.data, batch.input->data, bytes_of(batch.input->shape));
    device_.to_device(target_.data, batch.target->data, bytes_of(batch.target->shape));
    input_t_ = ds_tensor{input_.data, batch.input->dtype, batch.input->shape, dev};
    target_t_ = ds_tensor{target_.data, batch.target->dtype, batch.target->shape, dev};
    if (batch.predictions != nullptr) {
      if (bytes_of(batch.predictions->shape) > predictions_.bytes)
        throw std::logic_error("DeviceLayers: predictions larger than planned");
      predictions_t_ = ds_tensor{predictions_.data, DS_F32, batch.predictions->shape, dev};
    }
  }
  const std::vector<ds_tensor> views = layer_params(i, params);
  const ds_batch on_device = device_batch(batch);
  ds_tensor out{outputs_[i].data, DS_F32, output, dev};
  plugin_.forward(static_cast<int32_t>(i), views.data(), input_of(i, on_device), out, workspace(i), on_device);
  finish_staged_call();
  if (i + 1 < layers_.size()) {  // the loss stays fp32
    if (rounding_) device_.round_to(*rounding_, static_cast<float*>(out.data), static_cast<size_t>(shape_numel(output)));
    return;
  }
  device_.to_host(host_loss, outputs_[i].data, sizeof(float));
  device_.wait_copies(last_upload_);  // done (the layers waited for them): the host may change their sources
  if (batch.predictions != nullptr)
    device_.to_host(batch.predictions->data, predictions_.data, bytes_of(batch.predictions->shape));
}

void DeviceLayers::backward(size_t i, const std::vector<ds_tensor>* params, const std::vector<ds_tensor>& grads,
                            const GradSync& sync, float loss_grad, const ds_batch& batch) {
  const ds_device_type dev = device_.table()->device;
  const bool last = i + 1 == layers_.size();
  if (last) {
    device_.to_device(loss_grad_.data, &loss_grad, sizeof loss_grad);
    grad_next_ = &loss_grad_;
  }
  const std::vector<ds_tensor> param_views = layer_params(i, params);
  std::vector<ds_tensor> grad_views;  // the plugin adds into them
  const size_t buffer = keep_grads_ ? i : next_staging_;
  device_.ops_after_copies(grad_tickets_[buffer]);  // its last download has read it
  if (!keep_grads_) {
    next_staging_ = 1 - next_staging_;
    // A host gradient to upload may be the destination of a download still under way (a tied one).
    if (std::find(sync.zeroed.begin(), sync.zeroed.end(), false) != sync.zeroed.end()) device_.wait_copies(last_ticket_);
    grad_views = stage(grads, grads_[buffer], &sync.zeroed);
  } else {
    grad_views = views_in(grads, grads_[i]);
    kept_grad_views_[i] = grad_views;
    if (sync.first) device_.zero(grads_[i].data, grads_[i].bytes);
  }
  const ds_batch on_device = device_batch(batch);
  ds_tensor output{outputs_[i].data, DS_F32, layers_[i].output, dev};
  ds_tensor grad_output{grad_next_->data, DS_F32, layers_[i].output, dev};
  Buffer* grad_in = grad_next_ == &grad_a_ ? &grad_b_ : &grad_a_;
  ds_tensor grad_input{grad_in->data, DS_F32, layers_[i].input, dev};
  plugin_.backward(static_cast<int32_t>(i), param_views.data(), input_of(i, on_device), output, grad_output,
                   i == 0 ? nullptr : &grad_input, const_cast<ds_tensor*>(grad_views.data()), workspace(i), on_device);
  finish_staged_call();
  if (i > 0 && rounding_)
    device_.round_to(*rounding_, static_cast<float*>(grad_input.data), static_cast<size_t>(shape_numel(grad_input.shape)));
  if (!keep_grads_ || sync.last) {
    for (size_t k = 0; k < grads.size(); ++k)
      device_.to_host_async(grads[k].data, grad_views[k].data, bytes_of(grads[k].shape));
    last_ticket_ = grad_tickets_[buffer] = layer_tickets_[i] = device_.copies_issued();
  }
  grad_next_ = grad_in;
}

const std::vector<ds_tensor>& DeviceLayers::device_grads(size_t i) const {
  if (i >= kept_grad_views_.size() || kept_grad_views_[i].empty())
    throw std::logic_error("DeviceLayers: a layer's gradients are not kept on the device");
  return kept_grad_views_[i];
}

void DeviceLayers::wait_grads(size_t i) { device_.wait_copies(layer_tickets_[i]); }

}  // namespace ds
