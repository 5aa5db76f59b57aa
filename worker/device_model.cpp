// DeviceModel (device_model.h): buffers on the backend's device, the layer loop, the optimizer step.
#include "device_model.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "cuda/launch.h"

namespace ds {
namespace {

ds_shape batched(const ds_shape& s, int64_t n) {
  ds_shape out{};
  out.ndim = s.ndim + 1;
  out.dims[0] = n;
  for (int i = 0; i < s.ndim; ++i) out.dims[i + 1] = s.dims[i];
  return out;
}

size_t floats(const ds_shape& s) { return static_cast<size_t>(shape_numel(s)) * sizeof(float); }

}  // namespace

int64_t DeviceModel::count_parameters(const Plugin& plugin) {
  int64_t n = 0;
  for (const LayerInfo& l : plugin.layers())
    for (const ParamInfo& p : l.params)
      if (p.tied_to.empty()) n += p.numel();
  return n;
}

int64_t DeviceModel::count_tensors(const Plugin& plugin) {
  int64_t n = 0;
  for (const LayerInfo& l : plugin.layers())
    for (const ParamInfo& p : l.params) n += p.tied_to.empty();
  return n;
}

DeviceModel::DeviceModel(const Plugin& plugin, int64_t micro_batch, const std::vector<float>& initial)
    : plugin_(plugin), on_cuda_(plugin.backend().device == DS_DEVICE_CUDA), micro_batch_(micro_batch) {
  // Offsets: each non-tied tensor after the other; a tied one at its owner's.
  for (const LayerInfo& l : plugin.layers()) {
    auto& offs = offsets_.emplace_back();
    for (const ParamInfo& p : l.params) {
      if (p.tied_to.empty()) {
        offs.push_back(static_cast<size_t>(n_));
        n_ += p.numel();
        continue;
      }
      size_t owner = SIZE_MAX;
      for (size_t li = 0; li + 1 < offsets_.size(); ++li)
        for (size_t pi = 0; pi < plugin.layers()[li].params.size(); ++pi)
          if (plugin.layers()[li].name + "." + plugin.layers()[li].params[pi].name == p.tied_to) owner = offsets_[li][pi];
      if (owner == SIZE_MAX) throw std::logic_error("tied parameter without an owner: " + p.tied_to);
      offs.push_back(owner);
    }
  }
  if (static_cast<int64_t>(initial.size()) != n_)
    throw std::invalid_argument(fmt::format("{} initial parameter values for {} parameters", initial.size(), n_));
  const size_t bytes = static_cast<size_t>(n_) * sizeof(float);
  params_ = allocate(bytes);
  to_device(params_.data, initial.data(), bytes);
  grads_ = allocate(bytes);
  m_ = allocate(bytes);
  v_ = allocate(bytes);
  zero(m_.data, bytes);
  zero(v_.data, bytes);

  const ds_dataset_info info = plugin.dataset_info();
  input_dtype_ = info.input_dtype;
  shapes_.push_back(batched(info.input_shape, micro_batch));
  input_ = allocate(floats(shapes_[0]));
  target_ = allocate(floats(batched(info.target_shape, micro_batch)));
  size_t max_act = floats(shapes_[0]);
  for (int32_t i = 0; i < plugin.num_layers(); ++i) {
    shapes_.push_back(plugin.output_shape(i, shapes_[static_cast<size_t>(i)]));
    acts_.push_back(allocate(floats(shapes_.back())));
    workspaces_.push_back(allocate(plugin.workspace_bytes(i, shapes_[static_cast<size_t>(i)])));
    max_act = std::max(max_act, floats(shapes_.back()));
  }
  grad_a_ = allocate(max_act);
  grad_b_ = allocate(max_act);
  loss_grad_ = allocate(sizeof(float));
  const float one = 1.0f;
  to_device(loss_grad_.data, &one, sizeof one);
}

DeviceModel::~DeviceModel() {
  try {
    synchronize();
  } catch (...) {  // already reported by the call that failed
  }
  for (const Buffer& b : owned_) {
    try {
      if (on_cuda_) cuda::device_free(b.data);
      else std::free(b.data);
    } catch (...) {
    }
  }
}

DeviceModel::Buffer DeviceModel::allocate(size_t bytes) {
  owned_.reserve(owned_.size() + 1);
  Buffer b{nullptr, bytes};
  const size_t padded = (bytes + 255) / 256 * 256 + 256;  // never 0 bytes
  b.data = on_cuda_ ? cuda::device_alloc(padded) : std::aligned_alloc(256, padded);
  if (b.data == nullptr) throw std::bad_alloc();
  owned_.push_back(b);
  return b;
}

void DeviceModel::to_device(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  if (on_cuda_) cuda::copy_to_device(dst, src, bytes);
  else std::memcpy(dst, src, bytes);
}

void DeviceModel::to_host(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  if (on_cuda_) cuda::copy_to_host(dst, src, bytes);
  else std::memcpy(dst, src, bytes);
}

void DeviceModel::zero(void* dst, size_t bytes) {
  if (on_cuda_) cuda::zero_on_device(dst, bytes, nullptr);
  else std::memset(dst, 0, bytes);
}

float* DeviceModel::param_at(size_t offset) const { return static_cast<float*>(params_.data) + offset; }
float* DeviceModel::grad_at(size_t offset) const { return static_cast<float*>(grads_.data) + offset; }

ds_tensor DeviceModel::tensor(void* data, ds_dtype dtype, const ds_shape& shape) const {
  return ds_tensor{data, dtype, shape, plugin_.backend().device};
}

float DeviceModel::forward_backward(const std::vector<int32_t>& input, const std::vector<int32_t>& target) {
  const ds_dataset_info info = plugin_.dataset_info();
  const ds_shape target_shape = batched(info.target_shape, micro_batch_);
  if (input.size() != static_cast<size_t>(shape_numel(shapes_[0])) ||
      target.size() != static_cast<size_t>(shape_numel(target_shape)))
    throw std::invalid_argument(fmt::format("a batch of {} inputs and {} targets, expected {} and {}", input.size(),
                                            target.size(), shape_numel(shapes_[0]), shape_numel(target_shape)));
  to_device(input_.data, input.data(), input.size() * sizeof(int32_t));
  to_device(target_.data, target.data(), target.size() * sizeof(int32_t));
  zero(grads_.data, grads_.bytes);
  const ds_tensor in = tensor(input_.data, input_dtype_, shapes_[0]);
  const ds_tensor tg = tensor(target_.data, info.target_dtype, target_shape);
  const ds_batch batch{&in, &tg, 1, 0, nullptr};
  const int32_t L = plugin_.num_layers();
  std::vector<ds_tensor> params, grads;
  auto views = [&](int32_t layer) {
    params.clear();
    grads.clear();
    const LayerInfo& l = plugin_.layer(layer);
    for (size_t j = 0; j < l.params.size(); ++j) {
      const size_t off = offsets_[static_cast<size_t>(layer)][j];
      params.push_back(tensor(param_at(off), DS_F32, l.params[j].shape));
      grads.push_back(tensor(grad_at(off), DS_F32, l.params[j].shape));
    }
  };
  auto act = [&](int32_t i) {  // the input of layer i
    return i == 0 ? in : tensor(acts_[static_cast<size_t>(i - 1)].data, DS_F32, shapes_[static_cast<size_t>(i)]);
  };
  for (int32_t i = 0; i < L; ++i) {
    views(i);
    ds_tensor out = tensor(acts_[static_cast<size_t>(i)].data, DS_F32, shapes_[static_cast<size_t>(i + 1)]);
    plugin_.forward(i, params.data(), act(i), out, workspaces_[static_cast<size_t>(i)].data, batch);
  }
  void* dy = loss_grad_.data;
  for (int32_t i = L - 1; i >= 0; --i) {
    views(i);
    const ds_tensor x = act(i);
    const ds_tensor y = tensor(acts_[static_cast<size_t>(i)].data, DS_F32, shapes_[static_cast<size_t>(i + 1)]);
    const ds_tensor gy = tensor(dy, DS_F32, shapes_[static_cast<size_t>(i + 1)]);
    void* dx = dy == grad_a_.data ? grad_b_.data : grad_a_.data;
    ds_tensor gx = tensor(dx, DS_F32, shapes_[static_cast<size_t>(i)]);
    plugin_.backward(i, params.data(), x, y, gy, i > 0 ? &gx : nullptr, grads.data(),
                     workspaces_[static_cast<size_t>(i)].data, batch);
    dy = dx;
  }
  float loss = 0.0f;
  to_host(&loss, acts_.back().data, sizeof loss);
  return loss;
}

void DeviceModel::adam_step(const cpu::AdamArgs& args, bool decoupled) {
  float* p = param_at(0);
  const float* g = grad_at(0);
  float* m = static_cast<float*>(m_.data);
  float* v = static_cast<float*>(v_.data);
  if (on_cuda_) {
    cuda::adam_step(p, g, m, v, n_, args, decoupled, nullptr);
    return;
  }
  for (int64_t i = 0; i < n_; ++i) {  // the element body the CUDA kernel runs (this file: no FMA contraction)
    if (decoupled) cpu::adam_element<true>(p[i], g[i], m[i], v[i], args);
    else cpu::adam_element<false>(p[i], g[i], m[i], v[i], args);
  }
}

void DeviceModel::synchronize() const {
  if (on_cuda_) cuda::synchronize();
}

std::vector<float> DeviceModel::parameters() const {
  synchronize();
  std::vector<float> out(static_cast<size_t>(n_));
  to_host(out.data(), params_.data, out.size() * sizeof(float));
  return out;
}

void DeviceModel::load_state(const DeviceModel& other) {
  if (other.n_ != n_) throw std::invalid_argument("load_state: models of different sizes");
  other.synchronize();
  std::vector<float> host(static_cast<size_t>(n_));
  for (auto [to, from] : {std::pair{params_, other.params_}, {m_, other.m_}, {v_, other.v_}}) {
    other.to_host(host.data(), from.data, from.bytes);
    to_device(to.data, host.data(), to.bytes);
  }
}

std::vector<float> DeviceModel::gradients() const {
  synchronize();
  std::vector<float> out(static_cast<size_t>(n_));
  to_host(out.data(), grads_.data, out.size() * sizeof(float));
  return out;
}

}  // namespace ds
