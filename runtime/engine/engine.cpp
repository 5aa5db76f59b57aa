// The training engine at ZeRO stage 0 (see engine.h for the step's shape).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "engine/rng.h"

namespace ds {
namespace {

size_t elements(const ds_shape& s) {
  size_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= static_cast<size_t>(s.dims[d]);
  return n;
}

// [n, *sample] for a batch of n samples of shape `sample`.
ds_shape batched(int64_t n, const ds_shape& sample) {
  if (sample.ndim + 1 > DS_MAX_DIMS) throw PluginError("engine: a sample has too many dimensions");
  ds_shape s{};
  s.ndim = sample.ndim + 1;
  s.dims[0] = n;
  for (int d = 0; d < sample.ndim; ++d) s.dims[d + 1] = sample.dims[d];
  return s;
}

std::string shape_text(const ds_shape& s) {
  std::string t = "[";
  for (int d = 0; d < s.ndim; ++d) t += (d ? ", " : "") + std::to_string(s.dims[d]);
  return t + "]";
}

}  // namespace

Engine::Engine(const EngineConfig& config, Plugin& plugin, ProcessGroup& group, const OptimizerFactory& make_optimizer,
               std::unique_ptr<LrSchedule> schedule)
    : config_(config),
      plugin_(plugin),
      group_(group),
      schedule_(std::move(schedule)),
      sampler_(plugin.dataset_info().num_samples, group.rank(), group.size(), config.seed),
      data_(plugin.dataset_info()) {
  const int64_t per_step = config_.micro_batch * config_.grad_accum;
  steps_per_epoch_ = sampler_.per_rank() / per_step;
  if (steps_per_epoch_ == 0)
    throw ConfigError(fmt::format("the dataset has {} samples, {} per rank: fewer than one step's {} "
                                  "(train_micro_batch_size_per_gpu {} x gradient_accumulation_steps {})",
                                  data_.num_samples, sampler_.per_rank(), per_step, config_.micro_batch,
                                  config_.grad_accum));
  if (config_.zero_stage != 0 && config_.zero_stage != 1)
    throw ConfigError(fmt::format("zero_optimization.stage: {} is not implemented yet (0 and 1 are)", config_.zero_stage));
  build_layers();
  init_parameters();
  NormReducer reducer;
  if (config_.zero_stage == 1 && group_.size() > 1)
    reducer = [this](std::vector<double>& sums) { group_.allreduce(sums.data(), sums.size(), DataType::F64, ReduceOp::Sum); };
  optimizer_ = make_optimizer(config_.zero_stage == 0 ? num_params_ : part_size_, reducer);
  group_.broadcast(params_.data(), params_.size(), DataType::F32, 0);  // every replica starts identical
}

void Engine::build_layers() {
  const int n = plugin_.num_layers();
  if (n <= 0) throw PluginError(fmt::format("plugin {}: the model has no layers", plugin_.path()));
  ds_shape shape = batched(config_.micro_batch, data_.input_shape);
  size_t offset = 0, max_activation = elements(shape);
  for (int i = 0; i < n; ++i) {
    LayerInfo info = plugin_.layer(i);
    Layer layer;
    layer.name = info.name;
    layer.first_slot = slots_.size();
    layer.begin = offset;
    for (const auto& p : info.params) {
      ParamSlot slot{info.name + "." + p.name, p.shape, offset, elements(p.shape)};
      offset += slot.size;
      slots_.push_back(std::move(slot));
    }
    layer.num_slots = slots_.size() - layer.first_slot;
    layer.end = offset;
    layer.input_shape = shape;
    layer.output_shape = plugin_.output_shape(i, shape);
    layer.output.resize(elements(layer.output_shape));
    size_t ws = plugin_.workspace_bytes(i, shape);
    layer.workspace.resize((ws + sizeof(float) - 1) / sizeof(float));
    max_activation = std::max(max_activation, layer.output.size());
    shape = layer.output_shape;
    layers_.push_back(std::move(layer));
  }
  if (elements(shape) != 1)
    throw PluginError(fmt::format("plugin {}: the last layer '{}' must output the loss as [1], not {}",
                                  plugin_.path(), layers_.back().name, shape_text(shape)));
  num_params_ = offset;
  const size_t world = static_cast<size_t>(group_.size());
  part_size_ = config_.zero_stage == 0 ? num_params_ : (num_params_ + world - 1) / world;
  part_begin_ = config_.zero_stage == 0 ? 0 : static_cast<size_t>(group_.rank()) * part_size_;
  const size_t padded = config_.zero_stage == 0 ? num_params_ : part_size_ * world;
  params_.assign(padded, 0.0f);
  grads_.assign(padded, 0.0f);
  // The tensors as the optimizer sees them: clipped to this rank's range, empty when outside it
  // (every rank lists every tensor, in order, so Lamb's per-tensor norms can be summed across ranks).
  for (const ParamSlot& slot : slots_) {
    const size_t lo = std::max(slot.offset, part_begin_), hi = std::min(slot.offset + slot.size, part_begin_ + part_size_);
    tensor_ranges_.push_back(hi > lo ? TensorRange{lo - part_begin_, hi - lo} : TensorRange{0, 0});
  }
  grad_a_.assign(max_activation, 0.0f);
  grad_b_.assign(max_activation, 0.0f);
  input_data_.resize(elements(batched(config_.micro_batch, data_.input_shape)));
  target_data_.resize(elements(batched(config_.micro_batch, data_.target_shape)));
}

// Each parameter has its own random stream, seeded by (seed, parameter index): the initial weights
// depend on the seed only, never on the world size or the order of allocation.
void Engine::init_parameters() {
  size_t index = 0;
  for (int i = 0; i < static_cast<int>(layers_.size()); ++i) {
    LayerInfo info = plugin_.layer(i);
    for (const auto& p : info.params) {
      const ParamSlot& slot = slots_[index];
      SplitMix64 rng(mix_seed(config_.seed, index++));
      float* w = params_.data() + slot.offset;
      for (size_t k = 0; k < slot.size; ++k) {
        switch (p.init) {
          case DS_INIT_ZEROS: w[k] = 0.0f; break;
          case DS_INIT_ONES: w[k] = 1.0f; break;
          case DS_INIT_NORMAL: w[k] = static_cast<float>(p.a + p.b * rng.normal()); break;
          case DS_INIT_UNIFORM: w[k] = static_cast<float>(p.a + (p.b - p.a) * rng.uniform()); break;
          default: throw PluginError(fmt::format("plugin {}: parameter {} has unknown init kind {}", plugin_.path(),
                                                 slot.name, static_cast<int>(p.init)));
        }
      }
    }
  }
}

std::vector<ds_tensor> Engine::views(std::vector<float>& buffer, const Layer& layer) {
  std::vector<ds_tensor> out;
  for (size_t s = layer.first_slot; s < layer.first_slot + layer.num_slots; ++s)
    out.push_back(ds_tensor{buffer.data() + slots_[s].offset, DS_F32, slots_[s].shape});
  return out;
}

void Engine::forward(const ds_batch& batch) {
  const ds_tensor* input = batch.input;
  ds_tensor previous{};
  for (int i = 0; i < static_cast<int>(layers_.size()); ++i) {
    Layer& layer = layers_[i];
    std::vector<ds_tensor> params = views(params_, layer);
    ds_tensor output{layer.output.data(), DS_F32, layer.output_shape};
    plugin_.forward(i, params.data(), *input, output, layer.workspace.data(), batch);
    previous = output;
    input = &previous;
  }
}

void Engine::launch_reduction(size_t begin, size_t end) {
  if (begin >= end || group_.size() == 1) return;
  const double world = group_.size();
  const double pre = config_.prescale_gradients ? 1.0 / world : 1.0 / config_.predivide_factor;
  if (pre != 1.0)
    for (size_t k = begin; k < end; ++k) grads_[k] = static_cast<float>(grads_[k] * pre);
  pending_.push_back(group_.allreduce_async(grads_.data() + begin, end - begin, DataType::F32, ReduceOp::Sum));
}

// Backward through every layer, last to first. With `reduce_during` (the last micro-batch), each
// layer's gradients are final once its backward returns; since the flat buffer is in layer order,
// the finished gradients form a suffix, reduced asynchronously in buckets while backward goes on.
void Engine::backward(const ds_batch& batch, bool reduce_during) {
  float loss_grad = 1.0f / static_cast<float>(config_.grad_accum);
  ds_tensor grad_output{&loss_grad, DS_F32, layers_.back().output_shape};
  std::vector<float>* next = &grad_a_;
  size_t reduced_from = grads_.size();  // gradients in [reduced_from, end) are launched
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    Layer& layer = layers_[i];
    std::vector<ds_tensor> params = views(params_, layer);
    std::vector<ds_tensor> grads = views(grads_, layer);
    ds_tensor input = i == 0 ? *batch.input
                             : ds_tensor{layers_[i - 1].output.data(), DS_F32, layers_[i - 1].output_shape};
    ds_tensor output{layer.output.data(), DS_F32, layer.output_shape};
    ds_tensor grad_input{next->data(), DS_F32, layer.input_shape};
    plugin_.backward(i, params.data(), input, output, grad_output, i == 0 ? nullptr : &grad_input, grads.data(),
                     layer.workspace.data(), batch);
    grad_output = grad_input;
    next = next == &grad_a_ ? &grad_b_ : &grad_a_;
    if (reduce_during && reduced_from - layer.begin >= static_cast<size_t>(config_.reduce_bucket_elems)) {
      launch_reduction(layer.begin, reduced_from);
      reduced_from = layer.begin;
    }
  }
  if (reduce_during) launch_reduction(0, reduced_from);
}

StepStats Engine::step() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t epoch = steps_ / steps_per_epoch_;
  const int64_t within = steps_ % steps_per_epoch_;
  const int64_t mb = config_.micro_batch;
  std::fill(grads_.begin(), grads_.end(), 0.0f);

  ds_tensor input{input_data_.data(), data_.input_dtype, batched(mb, data_.input_shape)};
  ds_tensor target{target_data_.data(), data_.target_dtype, batched(mb, data_.target_shape)};
  double loss_sum = 0.0;
  for (int64_t m = 0; m < config_.grad_accum; ++m) {
    std::vector<int64_t> indices = sampler_.indices(epoch, (within * config_.grad_accum + m) * mb, mb);
    plugin_.get_batch(indices.data(), mb, input, target);
    ds_batch batch{&input, &target, steps_ + 1, static_cast<int32_t>(m)};
    forward(batch);
    loss_sum += layers_.back().output[0];
    backward(batch, config_.zero_stage == 0 && m == config_.grad_accum - 1);
  }
  const double norm = reduce_gradients();
  if (!std::isfinite(norm))
    throw std::runtime_error(fmt::format("step {}: the gradient norm is {} (fp32 training has no loss scaling to "
                                         "skip such a step); stopping", steps_ + 1, norm));
  if (config_.gradient_clipping > 0.0) {
    const double coef = std::min(1.0, config_.gradient_clipping / (norm + 1e-6));
    if (coef < 1.0)  // the gradients this rank updates with: all of them, or its partition
      for (float* g = grads_.data() + part_begin_; g != grads_.data() + part_begin_ + part_size_; ++g)
        *g = static_cast<float>(*g * coef);
  }
  ++steps_;
  const double lr = schedule_->lr(steps_);
  update(lr);

  double loss = loss_sum / static_cast<double>(config_.grad_accum);
  if (group_.size() > 1) group_.allreduce(&loss, 1, DataType::F64, ReduceOp::Avg);
  StepStats stats;
  stats.step = steps_;
  stats.epoch = epoch;
  stats.loss = loss;
  stats.lr = lr;
  stats.grad_norm = norm;
  stats.samples = global_batch();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

double Engine::reduce_gradients() {
  const double world = group_.size();
  double sum_sq = 0.0;
  if (config_.zero_stage == 0) {
    for (auto& work : pending_) work->wait();
    pending_.clear();
    if (group_.size() > 1) {
      const double post = config_.prescale_gradients ? 1.0 : config_.predivide_factor / world;
      if (post != 1.0)
        for (float& g : grads_) g = static_cast<float>(g * post);
    }
    for (float g : grads_) sum_sq += static_cast<double>(g) * g;
    return std::sqrt(sum_sq);
  }
  // Stage 1: each rank receives the sum of its partition, in place (the buffer is rank-major by
  // construction); the rest of grads_ is stale from here on and is never read.
  const double pre = config_.prescale_gradients ? 1.0 / world : 1.0 / config_.predivide_factor;
  const double post = config_.prescale_gradients ? 1.0 : config_.predivide_factor / world;
  if (pre != 1.0)
    for (float& g : grads_) g = static_cast<float>(g * pre);
  float* mine = grads_.data() + part_begin_;
  group_.reduce_scatter(grads_.data(), mine, part_size_, DataType::F32, ReduceOp::Sum);
  for (float* g = mine; g != mine + part_size_; ++g) {
    if (post != 1.0) *g = static_cast<float>(*g * post);
    sum_sq += static_cast<double>(*g) * *g;
  }
  if (group_.size() > 1) group_.allreduce(&sum_sq, 1, DataType::F64, ReduceOp::Sum);
  return std::sqrt(sum_sq);
}

void Engine::update(double lr) {
  if (config_.zero_stage == 0) {
    optimizer_->step(params_.data(), grads_.data(), num_params_, tensor_ranges_, lr, steps_);
    return;
  }
  float* mine = params_.data() + part_begin_;
  optimizer_->step(mine, grads_.data() + part_begin_, part_size_, tensor_ranges_, lr, steps_);
  group_.allgather(mine, params_.data(), part_size_, DataType::F32);  // in place
}

MemoryReport Engine::memory() const {
  MemoryReport r;
  r.params = params_.size() * sizeof(float);
  r.grads = grads_.size() * sizeof(float);
  for (auto& [name, buffer] : optimizer_->state()) r.optimizer_state += buffer->size() * sizeof(float);
  r.activations = (grad_a_.size() + grad_b_.size() + input_data_.size() + target_data_.size()) * sizeof(float);
  for (const auto& layer : layers_) {
    r.activations += layer.output.size() * sizeof(float);
    r.workspace += layer.workspace.size() * sizeof(float);
  }
  return r;
}

}  // namespace ds
