// The training engine at ZeRO stages 0-3, in fp32, fp16 or bf16 (see engine.h for the step's shape).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/format_bytes.h"
#include "cpu/convert.h"
#include "engine/rng.h"
#include "zero/collective_type.h"

namespace ds {
namespace {

// The 16-bit type values in `storage` are rounded to; none for fp32.
std::optional<amp::Half> half_of(amp::Storage storage) {
  if (storage == amp::Storage::F32) return std::nullopt;
  return storage == amp::Storage::BF16 ? amp::Half::BF16 : amp::Half::F16;
}

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

ds_shape with_rows(ds_shape s, int64_t rows) {
  s.dims[0] = rows;
  return s;
}

// Rank `rank`'s share (of `size`) of a full tensor whose share has shape `share` (ds_shard): along
// shard.dim the full tensor is shard.blocks blocks, each cut in `size` pieces; the share is piece
// `rank` of every block.
std::vector<float> take_share(const std::vector<float>& full, const ds_shape& share, ds_shard shard, int rank, int size) {
  size_t outer = 1, inner = 1;
  for (int d = 0; d < shard.dim; ++d) outer *= static_cast<size_t>(share.dims[d]);
  for (int d = shard.dim + 1; d < share.ndim; ++d) inner *= static_cast<size_t>(share.dims[d]);
  const size_t piece = static_cast<size_t>(share.dims[shard.dim] / shard.blocks) * inner;  // elements per piece and outer row
  const size_t blocks = static_cast<size_t>(shard.blocks), n = static_cast<size_t>(size), r = static_cast<size_t>(rank);
  std::vector<float> out;
  out.reserve(outer * blocks * piece);
  for (size_t o = 0; o < outer; ++o)
    for (size_t b = 0; b < blocks; ++b) {
      const auto from = full.begin() + static_cast<std::ptrdiff_t>(((o * blocks + b) * n + r) * piece);
      out.insert(out.end(), from, from + static_cast<std::ptrdiff_t>(piece));
    }
  return out;
}

std::string_view storage_name(amp::Storage s) {
  return s == amp::Storage::F32 ? "fp32" : s == amp::Storage::F16 ? "fp16" : "bf16";
}

bool same_shape(const ds_shape& a, const ds_shape& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.dims[d] != b.dims[d]) return false;
  return true;
}

// The plugin's own dataset (the mlp plugin's synthetic one).
class PluginDataset : public Dataset {
 public:
  explicit PluginDataset(Plugin& plugin) : plugin_(plugin) {
    if (plugin.dataset_info().num_samples == 0)
      throw ConfigError(fmt::format("the model ({}) has no data of its own: give the config a `data` block "
                                    "(\"data\": {{\"path\": \"…\"}})", plugin.name()));
  }
  ds_dataset_info info() const override { return plugin_.dataset_info(); }
  void get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) override {
    plugin_.get_batch(indices, n, input, target);
  }

 private:
  Plugin& plugin_;
};

std::string shape_text(const ds_shape& s) {
  std::string t = "[";
  for (int d = 0; d < s.ndim; ++d) t += (d ? ", " : "") + std::to_string(s.dims[d]);
  return t + "]";
}

}  // namespace

// The data's samples must be what the model takes.
void check_samples(const ds_dataset_info& model, const ds_dataset_info& data, const std::string& plugin) {
  if (model.input_dtype != data.input_dtype || model.target_dtype != data.target_dtype ||
      !same_shape(model.input_shape, data.input_shape) || !same_shape(model.target_shape, data.target_shape))
    throw ConfigError(fmt::format("data: samples are input {} and target {}, but the model ({}) takes input {} and "
                                  "target {} (check the model's seq_len)",
                                  shape_text(data.input_shape), shape_text(data.target_shape), plugin,
                                  shape_text(model.input_shape), shape_text(model.target_shape)));
}

Engine::Engine(const EngineConfig& config, Plugin& plugin, ProcessGroup& group, const OptimizerFactory& make_optimizer,
               std::unique_ptr<LrSchedule> schedule, Dataset* data)
    : config_(config),
      plugin_(plugin),
      group_(group),
      schedule_(std::move(schedule)),
      own_data_(data ? nullptr : std::make_unique<PluginDataset>(plugin)),
      sliced_(config.sequence_parallel ? std::make_unique<SequenceSlice>(data ? *data : *own_data_,
                                                                         config.sequence_parallel->rank(),
                                                                         config.sequence_parallel->size())
                                       : nullptr),
      dataset_(sliced_ ? *sliced_ : data ? *data : *own_data_),
      data_(dataset_.info()),
      sampler_(data_.num_samples, data_rank(), data_ranks(), config.seed) {
  rows_ = config_.micro_batch;
  if (data) check_samples(plugin.dataset_info(), data->info(), plugin.name());
  if (plugin_.sequence_parallel().size != (config_.sequence_parallel ? config_.sequence_parallel->size() : 1) ||
      (config_.sequence_parallel && group_.rank() % config_.sequence_parallel->size() != config_.sequence_parallel->rank()))
    throw std::invalid_argument("engine: the plugin's sequence-parallel split, its group and the gradient group differ");
  if (config_.device_group && config_.device_group->size() != group_.size())
    throw std::invalid_argument("engine: the device group and the data-parallel group differ in size");
  const int64_t per_step = config_.micro_batch * config_.grad_accum;
  steps_per_epoch_ = sampler_.per_rank() / per_step;
  if (steps_per_epoch_ == 0)
    throw ConfigError(fmt::format("the dataset has {} samples, {} per rank: fewer than one step's {} "
                                  "(train_micro_batch_size_per_gpu {} x gradient_accumulation_steps {})",
                                  data_.num_samples, sampler_.per_rank(), per_step, config_.micro_batch,
                                  config_.grad_accum));
  if (config_.zero_stage < 0 || config_.zero_stage > 3)
    throw ConfigError(fmt::format("zero_optimization.stage: {} is not one of 0, 1, 2, 3", config_.zero_stage));
  policy_ = zero::Policy::for_stage(config_.zero_stage);
  if (config_.low_precision_master &&
      (config_.precision != amp::Storage::BF16 || !policy_.optimizer_state || config_.grad_storage == amp::Storage::F16))
    throw ConfigError(fmt::format("bf16 master weights and gradients need bf16 precision, ZeRO stage 1-3 and fp32 or "
                                  "bf16 gradients, not {} at stage {} with {} gradients",
                                  storage_name(config_.precision), config_.zero_stage,
                                  storage_name(config_.grad_storage)));
  if (config_.nvme_offload && !policy_.optimizer_state)
    throw ConfigError("NVMe offload of the optimizer state needs ZeRO stage 1-3");
  if (config_.param_offload && !policy_.parameters)
    throw ConfigError("zero_optimization.offload_param: NVMe offload of the parameters needs ZeRO stage 3");
  if (config_.param_offload && config_.low_precision_master)
    throw ConfigError("zero_optimization.offload_param: NVMe offload of the parameters keeps an fp32 master copy apart, "
                      "which bf16 master weights (bf16.bf16_master_weights_and_grads) do without; use one or the other");
  elem_ = amp::storage_bytes(config_.precision);
  master_on_nvme_ = config_.nvme_offload && !config_.low_precision_master &&
                    (config_.precision != amp::Storage::F32 || config_.param_offload);
  if (config_.loss_scaling) scaler_.emplace(*config_.loss_scaling);
  if (config_.pipeline && policy_.gradients)
    throw ConfigError(fmt::format("zero_optimization.stage: {} with pipeline parallelism: ZeRO-2 and ZeRO-3 are "
                                  "incompatible with pipeline parallelism (as in DeepSpeed); use stage 0 or 1",
                                  config_.zero_stage));
  if (config_.tensor_parallel && plugin_.tensor_parallel().size != config_.tensor_parallel->size())
    throw std::invalid_argument("engine: the plugin was split for another tensor-parallel size than its group's");
  if (config_.tensor_parallel || config_.sequence_parallel) {
    model_groups_.tensor = config_.tensor_parallel;
    model_groups_.sequence = config_.sequence_parallel;
    collectives_ = model_collectives(model_groups_);
    plugin_.set_collectives(&collectives_);
  }
  if (config_.tensor_parallel && config_.device != nullptr)
    throw ConfigError("tensor parallelism runs on the CPU so far: set DS_ACCELERATOR=cpu");
  if (config_.sequence_parallel && config_.device != nullptr)
    throw ConfigError("sequence parallelism runs on the CPU so far: set DS_ACCELERATOR=cpu");
  if (config_.pipeline && config_.device != nullptr)
    throw ConfigError("pipeline parallelism runs on the CPU so far: set DS_ACCELERATOR=cpu");
  build_layers();
  build_partition();
  NormReducer reducer;
  if (policy_.optimizer_state && group_.size() > 1)
    reducer = [this](std::vector<double>& sums) { group_.allreduce(sums.data(), sums.size(), DataType::F64, ReduceOp::Sum); };
  if (config_.nvme_offload)
    open_swap([&](size_t n) { return make_optimizer(n, reducer); });
  else
    optimizer_ = make_optimizer(layout_->partition_size(), reducer);
  if (optimizer_ && optimizer_->reads_whole_tensors() && layout_->world() > 1) {  // unit by unit, as the gradients
    PartitionExchange exchange{group_.rank(), group_.size(), {}, {}};
    exchange.gather = [this](const float* partition, std::vector<float>& full) {
      full.assign(layout_->full_size(), 0.0f);
      for (const zero::Unit& u : layout_->units())
        if (u.chunk > 0) group_.allgather(partition + u.part_offset, full.data() + u.begin, u.chunk, DataType::F32);
    };
    exchange.scatter = [this](const std::vector<float>& full, float* partition) {
      for (const zero::Unit& u : layout_->units())
        if (u.chunk > 0)
          group_.reduce_scatter(full.data() + u.begin, partition + u.part_offset, u.chunk, DataType::F32, ReduceOp::Sum);
    };
    optimizer_->set_exchange(std::move(exchange));
  }
  build_segments();
  if (config_.device != nullptr) build_device_layers();
  init_parameters();
  pin_device_copies();
  if (policy_.parameters && !device_gather_) {
    std::function<void(std::span<std::byte>)> pin;  // the gathered units the device's uploads read
    if (device_layers_ && config_.pin_memory) pin = [this](std::span<std::byte> b) { pin_for_device(b); };
    fetcher_ = std::make_unique<zero::ParamFetcher>(*layout_, group_, *chunks_, config_.precision, config_.stage3,
                                                    config_.grad_accum, pin);
  }
}

Engine::~Engine() = default;

void Engine::build_layers() {
  const int total = plugin_.num_layers();
  if (total <= 0) throw PluginError(fmt::format("plugin {}: the model has no layers", plugin_.path()));
  std::vector<int> bounds{0, total};  // every layer on one stage
  int stage = 0;
  if (config_.pipeline) {
    bounds = config_.stage_bounds;
    stage = config_.pipeline->stage();
    if (bounds.size() != static_cast<size_t>(config_.pipeline->stages()) + 1 || bounds.front() != 0 ||
        bounds.back() != total || !std::is_sorted(bounds.begin(), bounds.end()) ||
        std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end())
      throw std::invalid_argument("engine: the pipeline's stage bounds do not cover the model's layers in order");
  }
  auto stage_of = [&](int layer) { return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), layer) - bounds.begin()) - 1; };
  first_layer_ = bounds[static_cast<size_t>(stage)];
  const int end = bounds[static_cast<size_t>(stage) + 1];

  // Every parameter of the model in order (their index numbers the random streams, so a stage's
  // parameters start as on one rank), and for each tied one the stages that hold it.
  struct Global {
    ParamInfo info;
    int layer;
    int64_t owner;
  };
  std::vector<Global> all;
  std::vector<std::string> names;
  for (int i = 0; i < total; ++i)
    for (const ParamInfo& p : plugin_.layer(i).params) {
      int64_t owner = -1;
      if (!p.tied_to.empty())  // the loader checked that it names an earlier layer's own parameter
        owner = std::find(names.begin(), names.end(), p.tied_to) - names.begin();
      names.push_back(plugin_.layer(i).name + "." + p.name);
      all.push_back({p, i, owner});
    }
  std::vector<size_t> global_offset(all.size(), 0);  // in the canonical flat order (a tied one: its owner's)
  for (size_t g = 0; g < all.size(); ++g) {
    if (all[g].owner >= 0) {
      global_offset[g] = global_offset[static_cast<size_t>(all[g].owner)];
      continue;
    }
    ds_shape full = all[g].info.shape;  // a tensor-parallel share's whole tensor
    if (all[g].info.shard.dim >= 0) full.dims[all[g].info.shard.dim] *= plugin_.tensor_parallel().size;
    global_offset[g] = model_params_;
    model_params_ += elements(full);
    model_tensors_.push_back({names[g], full});
  }
  std::vector<std::vector<int>> tie_stages(all.size());  // per owner: ascending stages
  for (size_t g = 0; g < all.size(); ++g)
    if (all[g].owner >= 0) {
      auto& stages = tie_stages[static_cast<size_t>(all[g].owner)];
      for (int s : {stage_of(all[static_cast<size_t>(all[g].owner)].layer), stage_of(all[g].layer)})
        if (std::find(stages.begin(), stages.end(), s) == stages.end()) stages.push_back(s);
      std::sort(stages.begin(), stages.end());
    }

  ds_shape shape = batched(config_.micro_batch, data_.input_shape);
  for (int i = 0; i < first_layer_; ++i) shape = plugin_.output_shape(i, shape);
  size_t max_activation = elements(shape), max_workspace = 0, tied = 0;
  std::vector<size_t> workspace_sizes;
  size_t g = 0;
  while (g < all.size() && all[g].layer < first_layer_) ++g;
  for (int i = first_layer_; i < end; ++i) {
    Layer layer;
    layer.name = plugin_.layer(i).name;
    layer.first_slot = slots_.size();
    for (; g < all.size() && all[g].layer == i; ++g) {
      const Global& p = all[g];
      const size_t source = p.owner >= 0 ? static_cast<size_t>(p.owner) : g;  // whose values it starts from
      const ParamInfo& init = all[source].info;
      ParamSlot slot;
      slot.name = names[g];
      slot.tied_to = p.info.tied_to;
      slot.shape = p.info.shape;
      slot.size = elements(p.info.shape);
      slot.stream = source;
      slot.global_offset = global_offset[g];
      slot.shard = init.shard;  // a tied parameter is cut as its owner is
      slot.init = init.init;
      slot.a = init.a;
      slot.b = init.b;
      if (tie_stages[source].size() > 1) slot.tie_stages = tie_stages[source];
      if (p.owner >= 0 && stage_of(all[source].layer) == stage) {  // tied within the stage: no storage
        slot.owner = static_cast<int64_t>(std::find_if(slots_.begin(), slots_.end(), [&](const ParamSlot& s) {
                                            return s.name == p.info.tied_to;
                                          }) - slots_.begin());
        slot.tied_offset = tied;
        tied += slot.size;
      } else {
        slot.replica = p.owner >= 0;
        layer.size += slot.size;
      }
      slots_.push_back(std::move(slot));
    }
    layer.num_slots = slots_.size() - layer.first_slot;
    layer.input_shape = shape;
    layer.output_shape = plugin_.output_shape(i, shape);
    const size_t ws = (plugin_.workspace_bytes(i, shape) + sizeof(float) - 1) / sizeof(float);
    max_workspace = std::max(max_workspace, ws);
    workspace_sizes.push_back(config_.recompute ? 0 : ws);
    max_activation = std::max(max_activation, elements(layer.output_shape));
    shape = layer.output_shape;
    layers_.push_back(std::move(layer));
  }
  if (last_stage() && elements(shape) != 1)
    throw PluginError(fmt::format("plugin {}: the last layer '{}' must output the loss as [1], not {}",
                                  plugin_.path(), layers_.back().name, shape_text(shape)));
  // With a device the layers' activations, their gradients and workspaces live there (DeviceLayers):
  // the host keeps only the loss (the last layer's output, [1]).
  const bool on_host = config_.device == nullptr;
  if (config_.recompute && on_host) shared_workspace_.resize(max_workspace);
  tied_elems_ = tied;
  tied_values_.assign(tied, 0.0f);
  tied_grads_.assign(tied, 0.0f);
  if (on_host) {
    grad_a_.assign(max_activation, 0.0f);
    grad_b_.assign(max_activation, 0.0f);
  }
  const int buffers = config_.pipeline ? pipe::in_flight(stage, config_.pipeline->stages(), static_cast<int>(config_.grad_accum)) : 1;
  in_flight_.resize(static_cast<size_t>(buffers));
  for (MicroBatch& m : in_flight_) {
    m.input.resize(elements(batched(config_.micro_batch, data_.input_shape)));
    m.target.resize(elements(batched(config_.micro_batch, data_.target_shape)));
    for (size_t i = 0; i < layers_.size(); ++i) {
      const bool kept = on_host || i + 1 == layers_.size();
      m.outputs.emplace_back(kept ? elements(layers_[i].output_shape) : 0);
      m.workspaces.emplace_back(on_host ? workspace_sizes[i] : 0);
    }
    if (!first_stage()) {
      m.stage_input.resize(elements(layers_.front().input_shape));
      m.grad_input.resize(elements(layers_.front().input_shape));
    }
    if (!last_stage()) m.grad_output.resize(elements(layers_.back().output_shape));
  }
}

// The layers' calls on config_.device: what the device holds, and the arithmetic it uses.
void Engine::build_device_layers() {
  std::vector<DeviceLayers::LayerShape> shapes;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    size_t floats = 0;
    for (size_t s = l.first_slot; s < l.first_slot + l.num_slots; ++s) floats += (slots_[s].size + 3) / 4 * 4;
    shapes.push_back({l.input_shape, l.output_shape, plugin_.workspace_bytes(static_cast<int>(i), l.input_shape), floats, std::nullopt});
  }
  const ds_shape predictions = plugin_.predictions_shape(batched(config_.micro_batch, data_.input_shape));
  const std::optional<amp::Half> rounding = half_of(config_.precision);
  config_.device->set_half_matmuls(rounding);  // as DeepSpeed's 16-bit models multiply
  const std::string blocker = device_step_blocker();
  // Stage 3 holds only its partition: gathered on the device with the optimizer there, else on the host.
  using Source = DeviceLayers::ParamSource;
  const Source params = !policy_.parameters ? Source::kept : blocker.empty() ? Source::provided : Source::staged;
  // Stages 0-1 sum the step's micro-batches in one fp32 host buffer: the device can sum them instead, and
  // keeps them there when it also steps the optimizer (in any grad_accum_dtype: device_step.h rounds).
  const bool keep_grads = blocker.empty() || (!policy_.gradients && config_.grad_storage == amp::Storage::F32);
  if (blocker.empty() && partitions_grads_on_device()) {
    // Each unit's layers side by side in one shared buffer, which the next unit down reuses: the sums go
    // into the partition each micro-batch. A layer that uses a tied value keeps its own buffer, whose
    // gradients join the owner's when backward reaches the owner's unit.
    size_t unit = SIZE_MAX, at = 0;
    for (size_t i = layers_.size(); i-- > 0;) {
      if (layout_->unit_index(i) != unit) unit = layout_->unit_index(i), at = 0;
      if (uses_tied_values(i)) continue;
      shapes[i].shared_grads_at = at;
      at += shapes[i].param_floats;
    }
  }
  device_layers_ = std::make_unique<DeviceLayers>(*config_.device, plugin_, shapes, config_.recompute, params,
                                                  keep_grads, data_, config_.micro_batch,
                                                  predictions.ndim ? elements(predictions) : 0, rounding);
  if (blocker.empty()) {
    device_layers_->keep_uploads(false);  // uploaded once: the device updates them
    build_device_step();
    // The host's gradient buffers and its update's views of them go unused: the device keeps the sums.
    grads_->release_storage();
    free_storage(grads32_);
    for (PageVector<float>& scratch : grad_scratch_) free_storage(scratch);
    free_storage(tied_grads_);
    hold_upload_sources(false);  // (stage 3 never reads them: the layers' values, tied ones' included, are gathered there)
    segments_.clear();
    optimizer_->hold_state(false);  // a fresh state: zeroed there at the first update
    optimizer_place_ = "the optimizer steps on the device: parameters, gradients and optimizer state stay there";
    if (policy_.parameters) optimizer_place_ += " (this rank's partition of the parameters, gathered there layer by layer)";
  } else {
    optimizer_place_ = "the optimizer steps on the CPU, with the fp32 parameters, gradients and optimizer state there "
                       "(as ZeRO-Offload)";
    if (config_.optimizer_on_device) optimizer_place_ += ": " + blocker;
  }
}

std::string Engine::device_step_blocker() const {
  if (!config_.optimizer_on_device) return "zero_optimization.offload_optimizer";
  if (group_.size() > 1 && !config_.device_group)
    return "with several ranks, the gradients need a device group (NCCL, one GPU per rank)";
  if (config_.pipeline || config_.tensor_parallel) return "pipeline and tensor parallelism step on the host";
  if (policy_.parameters && config_.params_on_host) return "zero_optimization.offload_param";
  if (config_.low_precision_master) return "bf16 master weights (bf16_master_weights_and_grads) run on the host";
  if (config_.nvme_offload || config_.param_offload) return "NVMe offload";
  if (!optimizer_->device_update(0.0, 1)) return "this optimizer (or its bf16 state) runs on the host only";
  return {};
}

// Stage 3: what the device gathers for each layer, from this rank's partition there.
void Engine::build_device_gather() {
  DeviceGather::Plan plan;
  for (const zero::Unit& u : layout_->units()) plan.units.push_back({u.padded(), u.chunk, u.part_offset});
  const std::vector<bool> persistent = zero::ParamFetcher::persistent_layers(*layout_, config_.stage3);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t unit_begin = layout_->unit_of_layer(i).begin;
    DeviceGather::Layer& layer = plan.layers.emplace_back();
    layer.unit = layout_->unit_index(i);
    layer.persistent = persistent[layer.unit];
    for (size_t s = layers_[i].first_slot; s < layers_[i].first_slot + layers_[i].num_slots; ++s) {
      const ParamSlot& slot = slots_[s];
      std::optional<size_t> tie;
      if (slot.owner >= 0) {
        const size_t owner = layer_of_slot(static_cast<size_t>(slot.owner));
        tie = plan.ties.size();
        plan.ties.push_back({owner, slot.offset - layout_->unit_of_layer(owner).begin, slot.size});
      }
      layer.params.push_back({slot.shape, slot.size, slot.offset - unit_begin, tie});
    }
  }
  plan.n = layout_->partition_size();
  plan.storage = half_of(config_.precision);
  plan.group = config_.device_group;
  device_gather_ = std::make_unique<DeviceGather>(*config_.device, *device_layers_, std::move(plan));
}

size_t Engine::layer_of_slot(size_t slot) const {
  return static_cast<size_t>(
      std::find_if(layers_.begin(), layers_.end(), [&](const Layer& l) { return slot < l.first_slot + l.num_slots; }) -
      layers_.begin());
}

// What the device's step updates: each tensor this rank holds (the optimizer's order is the
// partition's), and the tied copies it refreshes.
void Engine::build_device_step() {
  if (policy_.parameters) build_device_gather();
  std::vector<DeviceStep::Tensor> tensors;
  std::vector<DeviceStep::Tie> ties;
  for (size_t i = 0; i < layers_.size(); ++i)
    for (size_t k = 0; k < layers_[i].num_slots; ++k) {
      const ParamSlot& slot = slots_[layers_[i].first_slot + k];
      if (slot.owner >= 0) {
        const auto owner = static_cast<size_t>(slot.owner);
        const size_t owner_layer = layer_of_slot(owner);
        ties.push_back({i, k, owner_layer, owner - layers_[owner_layer].first_slot});
        continue;
      }
      const size_t unit_index = layout_->unit_index(i);
      const zero::Unit& unit = layout_->units()[unit_index];
      const zero::Range mine = layout_->owned_part(slot.offset, slot.size);
      DeviceStep::Tensor t;
      t.layer = i;
      t.index = k;
      t.size = slot.size;
      t.count = mine.size;
      t.offset = mine.offset;
      // where this rank's part starts in the full buffer: its chunk's start, and the part's place in the chunk
      if (mine.size > 0) t.from = layout_->owned_begin(unit) + (mine.offset - unit.part_offset) - slot.offset;
      t.unit = unit_index;
      t.in_unit = slot.offset - unit.begin;
      t.host = slot.offset;
      tensors.push_back(t);
    }
  DeviceStep::Plan plan;
  if (group_.size() > 1)  // each unit's sum across the ranks goes through a flat buffer
    for (const zero::Unit& u : layout_->units()) plan.units.push_back({u.padded(), u.chunk, u.part_offset});
  plan.partitioned = policy_.optimizer_state && group_.size() > 1;  // every rank updates its chunks, then gathers the rest
  plan.tensors = std::move(tensors);
  plan.layout_units = layout_->units().size();
  plan.ties = std::move(ties);
  plan.n = layout_->partition_size();
  plan.state_buffers = optimizer_->state().size();
  plan.rounding = half_of(config_.precision);
  plan.grad_rounding = half_of(config_.grad_storage);
  plan.group = config_.device_group;
  plan.partition_grads = partitions_grads_on_device();
  plan.gathered = device_gather_.get();
  device_step_ = std::make_unique<DeviceStep>(*config_.device, *device_layers_, std::move(plan));
}

// Stage 2 on several ranks with the optimizer on the device: each rank keeps only its partition's sums.
bool Engine::partitions_grads_on_device() const { return policy_.gradients && group_.size() > 1; }

bool Engine::uses_tied_values(size_t layer) const {
  const Layer& l = layers_[layer];
  for (size_t s = l.first_slot; s < l.first_slot + l.num_slots; ++s)
    if (slots_[s].owner >= 0) return true;
  return false;
}

void Engine::sync_host() {
  if (!device_step_) return;
  hold_host_state();  // (before the first update: the fresh, zeroed optimizer state)
  if (!host_stale_) return;
  device_step_->store(master_.empty() ? nullptr : master_.data(), optimizer_->state(),
                      [&](const DeviceStep::Tensor& t, const float* values) {
                        cpu::from_float(config_.precision, values, params_.data() + t.host * elem_, t.size);
                      });
  if (device_gather_) device_gather_->store(params_.data());  // stage 3: the parameters' partition, as stored
  host_stale_ = false;
}

// The device step keeps the master and optimizer state there, and at stages 0-2 the full parameters too:
// the host's copies, which it reads at the first update and brings up to date only when something reads
// them (sync_host) or replaces them (restore), are freed after each update and made again for those (the
// parameters unpinned first, and pageable when made again). A fresh optimizer state is never on the host:
// the device zeroes its own (the engine frees the host's when it builds the device step, before anything
// writes it).
void Engine::release_host_state() {
  if (!host_state_held_) return;
  freed_peak_.keep_larger(memory());
  optimizer_->hold_state(false);
  master_elems_ = master_.size();
  free_storage(master_);
  if (!policy_.parameters) {  // (stage 3's partition stays: the device gathers from it after a restore)
    device_layers_->unpin(params_.data());
    params_bytes_ = params_.size();
    free_storage(params_);
  }
  host_state_held_ = false;
}

void Engine::hold_host_state() {
  if (device_step_) optimizer_->hold_state(true);  // (made anew only where freed)
  if (host_state_held_) return;
  master_.assign(master_elems_, 0.0f);
  if (params_bytes_ > 0) params_.assign(params_bytes_, std::byte{0});
  params_bytes_ = 0;
  host_state_held_ = true;
}

// The host buffers the device's copies read and write, page-locked (ZeRO-Offload's pin_memory; they
// are PageVectors, so that no two share a page, which would refuse the second pin): the
// parameters at stages 0-2 (in their stored precision) or stage 3's 16-bit training's fp32 layer
// scratch, the fp32 gradients (stages 0-1: the full buffer; 2-3: the pool's buckets, made now) or the
// 16-bit scratch, and the tied parameters' copies; and stage 3's gathered units, as the fetcher makes
// them (pin_for_device).
void Engine::pin_device_copies() {
  if (!device_layers_ || !config_.pin_memory) return;
  std::vector<std::span<std::byte>> ranges;
  for (PageVector<float>* v : {&grad_scratch_[0], &grad_scratch_[1], &tied_values_, &tied_grads_})
    ranges.push_back(std::as_writable_bytes(std::span(*v)));
  ranges.push_back(policy_.parameters ? std::as_writable_bytes(std::span(param_scratch_)) : std::span(params_));
  if (config_.grad_storage == amp::Storage::F32 && !device_step_) {  // (with device_step_ they stay there)
    ranges.push_back(grads_->full_buffer());
    for (std::span<std::byte> bucket : grads_->reserve_buckets()) ranges.push_back(bucket);
  }
  for (std::span<std::byte> r : ranges) pin_for_device(r);
}

void Engine::pin_for_device(std::span<std::byte> range) {
  std::string why;
  if (device_layers_->pin(range.data(), range.size(), why)) return;
  unpinned_bytes_ += range.size();
  device_note_ = fmt::format("{} of the host buffers that the device's copies use could not be pinned ({}); those "
                             "copies run at pageable memory's speed",
                             format_bytes(unpinned_bytes_), why);
}

// The layout of the flat buffers, the buffers, and what the optimizer sees: this rank's chunks as
// segments, and every tensor clipped to them (empty when outside; every rank lists every tensor in
// order, so Lamb's per-tensor norms can be summed across ranks).
void Engine::build_partition() {
  std::vector<size_t> layer_sizes;
  for (const Layer& layer : layers_) layer_sizes.push_back(layer.size);
  const auto unit_elems = static_cast<size_t>(
      policy_.optimizer_state ? std::min(config_.reduce_bucket_elems, config_.allgather_bucket_elems)
                              : config_.reduce_bucket_elems);
  const bool partitioned = policy_.optimizer_state;
  layout_ = std::make_unique<zero::PartitionLayout>(layer_sizes, std::max<size_t>(unit_elems, 1), policy_.parameters,
                                                    partitioned ? group_.size() : 1, partitioned ? group_.rank() : 0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    size_t offset = layout_->layer_begin(i);
    for (size_t s = layers_[i].first_slot; s < layers_[i].first_slot + layers_[i].num_slots; ++s) {
      if (slots_[s].owner >= 0) continue;
      slots_[s].offset = offset;
      offset += slots_[s].size;
    }
    num_params_ += layer_sizes[i];
  }
  for (ParamSlot& slot : slots_)
    if (slot.owner >= 0) slot.offset = slots_[static_cast<size_t>(slot.owner)].offset;
  const size_t partition = layout_->partition_size();
  if (!config_.param_offload)
    params_.assign((policy_.parameters ? partition : layout_->full_size()) * elem_, std::byte{0});
  if (config_.param_offload) open_param_swap();
  else if (policy_.parameters) chunks_ = std::make_unique<zero::MemoryChunks>(*layout_, params_.data(), elem_);
  grads_ = std::make_unique<zero::GradientReducer>(*layout_, group_, policy_,
                                                   zero::Averaging{config_.prescale_gradients, config_.predivide_factor},
                                                   config_.overlap_comm, config_.grad_storage);
  const size_t max_layer = *std::max_element(layer_sizes.begin(), layer_sizes.end());
  const bool fp32_copies = !config_.low_precision_master;
  if ((config_.precision != amp::Storage::F32 || config_.param_offload) && fp32_copies && !master_on_nvme_)
    master_.assign(partition, 0.0f);
  if (config_.precision != amp::Storage::F32) param_scratch_elems_ = max_layer;
  param_scratch_.assign(param_scratch_elems_, 0.0f);
  if (config_.grad_storage != amp::Storage::F32)  // a device's downloads alternate between two
    for (size_t k = 0; k < (config_.device != nullptr ? 2u : 1u); ++k) grad_scratch_[k].assign(max_layer, 0.0f);
  for (const ParamSlot& slot : slots_)
    if (slot.owner < 0) {
      const zero::Range mine = layout_->owned_part(slot.offset, slot.size);
      const auto [rows, cols] = muon_matrix(slot.replica ? slot.tied_to : slot.name,
                                            std::span<const int64_t>(slot.shape.dims, slot.shape.ndim));
      tensor_ranges_.push_back(TensorRange{mine.offset, mine.size, rows, cols, slot.offset,
                                           mine.size > 0 ? layout_->owned_within(slot.offset) : 0});
    }
}

// What the optimizer updates: this rank's chunks, merged where they are contiguous. With 16-bit
// gradients and an fp32 master in memory, an optimizer that fuses mixed precision (Adam) reads the
// 16-bit gradients themselves and writes the 16-bit parameters as it updates the master; otherwise the
// gradients are widened into an fp32 partition first (grads32_) and the master rounded after the step.
void Engine::build_segments() {
  const bool wide_grads = config_.grad_storage != amp::Storage::F32 && !config_.low_precision_master;
  fused_update_ = wide_grads && !master_.empty() && !swapper_ && !param_swapper_ &&
                  optimizer_->fuses_mixed_precision();
  if (wide_grads && !fused_update_) grads32_.assign(layout_->partition_size(), 0.0f);
  const amp::Storage grad_type = fused_update_ ? config_.grad_storage : optimizer_grad_storage();
  const size_t p_bytes = amp::storage_bytes(master_storage()), g_bytes = amp::storage_bytes(grad_type);
  for (const zero::Unit& u : layout_->units()) {
    if (u.chunk == 0) continue;
    std::byte* p = master_on_nvme_ ? nullptr : master(u);  // on NVMe: set per sub-group (segments_in)
    const auto* g = static_cast<const std::byte*>(grads32_.empty() ? grads_->owned_grads(u) : grads32_.data() + u.part_offset);
    std::byte* copy = fused_update_ ? owned_params(u) : nullptr;
    if (!segments_.empty()) {
      Segment& last = segments_.back();
      const bool params_follow = p == nullptr ? last.params == nullptr
                                              : static_cast<std::byte*>(last.params) + last.size * p_bytes == p;
      const bool copy_follows = copy == nullptr || static_cast<std::byte*>(last.param_copy) + last.size * elem_ == copy;
      if (params_follow && copy_follows && static_cast<const std::byte*>(last.grads) + last.size * g_bytes == g) {
        last.size += u.chunk;  // contiguous with the previous unit's chunk
        continue;
      }
    }
    Segment segment{p, g, u.chunk, master_storage(), grad_type};
    segment.param_copy = copy;
    segment.copy_type = config_.precision;
    segments_.push_back(segment);
  }
}

std::byte* Engine::owned_params(const zero::Unit& unit) {
  if (!param_swapper_) return params_.data() + (policy_.parameters ? unit.part_offset : layout_->owned_begin(unit)) * elem_;
  std::byte* chunk = param_swapper_->memory(static_cast<size_t>(&unit - layout_->units().data()));
  if (!chunk && unit.chunk > 0) throw std::logic_error("engine: a swapped parameter chunk used as if in memory");
  return chunk;
}

void Engine::put_params(const zero::Unit& unit, size_t lo, const float* values, size_t n) {
  if (n == 0) return;
  const auto index = static_cast<size_t>(&unit - layout_->units().data());
  if (!param_swapper_ || param_swapper_->memory(index)) {
    cpu::from_float(config_.precision, values, owned_params(unit) + lo * elem_, n);
    return;
  }
  if (lo == 0) staged_chunk_ = param_swapper_->stage(index);  // chunks are written whole, in order
  cpu::from_float(config_.precision, values, staged_chunk_ + lo * elem_, n);
  if (lo + n == unit.chunk) param_swapper_->commit(index);
}

amp::Storage Engine::master_storage() const {
  return config_.low_precision_master ? config_.precision : amp::Storage::F32;
}

amp::Storage Engine::optimizer_grad_storage() const {
  return config_.low_precision_master ? config_.grad_storage : amp::Storage::F32;
}

std::byte* Engine::master(const zero::Unit& unit) {
  if (master_.empty()) return owned_params(unit);  // fp32, or the 16-bit parameters are the master
  return reinterpret_cast<std::byte*>(master_.data() + unit.part_offset);
}

// Each parameter has its own random stream, seeded by (seed, parameter index): the initial weights
// depend on the seed only, never on the world size, the stage, the precision or the order of
// allocation. Under mixed precision the fp32 values become the master copy and are rounded into the
// 16-bit parameters.
void Engine::initial_values(size_t slot, std::vector<float>& values) const {
  const ParamSlot& p = slots_[slot];
  SplitMix64 rng(mix_seed(config_.seed, p.stream));
  const ParallelRank tp = plugin_.tensor_parallel();
  const bool share = p.shard.dim >= 0 && tp.size > 1;
  values.resize(share ? p.size * static_cast<size_t>(tp.size) : p.size);  // a share: the full tensor first
  for (float& w : values) {
    switch (p.init) {
      case DS_INIT_ZEROS: w = 0.0f; break;
      case DS_INIT_ONES: w = 1.0f; break;
      case DS_INIT_NORMAL: w = static_cast<float>(p.a + p.b * rng.normal()); break;
      case DS_INIT_UNIFORM: w = static_cast<float>(p.a + (p.b - p.a) * rng.uniform()); break;
      default: throw PluginError(fmt::format("plugin {}: parameter {} has unknown init kind {}", plugin_.path(),
                                             p.name, static_cast<int>(p.init)));
    }
  }
  if (share) values = take_share(values, p.shape, p.shard, tp.rank, tp.size);
}

// Stage 3: this rank's part of each of the layer's tensors, [chunk] in fp32.
void Engine::initial_chunk(size_t layer, std::vector<float>& chunk) const {
  const zero::Unit& u = layout_->unit_of_layer(layer);
  chunk.assign(u.chunk, 0.0f);
  std::vector<float> values;
  for (size_t j = 0; j < layers_[layer].num_slots; ++j) {
    const size_t index = layers_[layer].first_slot + j;
    const ParamSlot& slot = slots_[index];
    if (slot.owner >= 0) continue;  // tied: the owner's values
    if (layout_->owned_part(slot.offset, slot.size).size == 0) continue;
    initial_values(index, values);
    copy_owned_part(slot, u, values, chunk.data(), u.part_offset);
  }
}

// This rank's part of a slot's whole tensor `values` (in unit u) into `out`, which starts at partition position
// `out_begin`.
void Engine::copy_owned_part(const ParamSlot& slot, const zero::Unit& u, const std::vector<float>& values, float* out,
                             size_t out_begin) const {
  const zero::Range mine = layout_->owned_part(slot.offset, slot.size);
  if (mine.size == 0) return;
  const size_t first = layout_->owned_begin(u) + (mine.offset - u.part_offset) - slot.offset;  // in `values`
  std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(first), mine.size, out + (mine.offset - out_begin));
}

// Stages 0-2 fill the full buffer tensor by tensor (rank 0's values, broadcast, so every replica starts
// identical even if ranks' maths libraries differ), rounding each to the stored precision as it comes, so
// that no more than one tensor is ever held in fp32 beyond the master copy; stage 3 one layer's chunk at a
// time, for the same reason.
void Engine::init_parameters() {
  if (!policy_.parameters) {
    const bool fp32 = config_.precision == amp::Storage::F32;
    auto* full32 = reinterpret_cast<float*>(params_.data());  // (fp32 training: the parameters are the fp32 values)
    // This rank's fp32 chunks: the master, or, with the master on NVMe, a partition for the swap file's first pass.
    std::vector<float> owned_initial(!fp32 && master_.empty() && swapper_ ? layout_->partition_size() : 0);
    float* owned = !master_.empty() ? master_.data() : !owned_initial.empty() ? owned_initial.data() : nullptr;
    std::vector<float> values;
    for (const Layer& layer : layers_)
      for (size_t s = layer.first_slot; s < layer.first_slot + layer.num_slots; ++s) {
        const ParamSlot& slot = slots_[s];
        if (slot.owner >= 0) continue;
        initial_values(s, values);
        group_.broadcast(values.data(), values.size(), DataType::F32, 0);
        if (fp32) std::copy(values.begin(), values.end(), full32 + slot.offset);
        else cpu::from_float(config_.precision, values.data(), params_.data() + slot.offset * elem_, values.size());
        if (owned != nullptr)
          copy_owned_part(slot, layout_->unit_of_layer(static_cast<size_t>(&layer - layers_.data())), values, owned, 0);
      }
    if (swapper_)
      init_swapped([&](const zero::Unit& u) { return fp32 ? full32 + layout_->owned_begin(u) : owned + u.part_offset; });
    return;
  }
  std::vector<float> chunk;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const zero::Unit& u = layout_->unit_of_layer(i);
    initial_chunk(i, chunk);
    put_params(u, 0, chunk.data(), u.chunk);
    if (!master_.empty()) std::copy(chunk.begin(), chunk.end(), master_.begin() + static_cast<std::ptrdiff_t>(u.part_offset));
  }
  if (!swapper_) return;
  size_t cached = SIZE_MAX;  // the unit whose chunk is in `chunk`: sub-groups visit units in order
  init_swapped([&](const zero::Unit& u) {
    const auto index = static_cast<size_t>(&u - layout_->units().data());
    if (index != cached) initial_chunk(u.first_layer, chunk);
    cached = index;
    return chunk.data();
  });
}

// The swap file's initial master copy (when it is there) and zero moments, sub-group by sub-group;
// chunk_of(unit) gives the unit's initial fp32 chunk.
void Engine::init_swapped(const std::function<const float*(const zero::Unit&)>& chunk_of) {
  const size_t first = master_on_nvme_ ? 1 : 0;
  swapper_->pass(false, true, [&](size_t begin, size_t count, std::span<std::byte* const> streams) {
    for (size_t s = first; s < streams.size(); ++s)
      std::memset(streams[s], 0, count * amp::storage_bytes(optimizer_->state()[s - first].storage));
    if (master_on_nvme_)
      for_each_owned(begin, count, [&](const zero::Unit& u, size_t lo, size_t hi) {
        std::copy_n(chunk_of(u) + (lo - u.part_offset), hi - lo, reinterpret_cast<float*>(streams[0]) + (lo - begin));
      });
  });
}

void Engine::views(const void* layer_base, const float* tied_base, size_t layer, std::vector<ds_tensor>& out,
                   ds_dtype type) const {
  const size_t begin = layout_->layer_begin(layer);
  const size_t elem = type == DS_F32 ? sizeof(float) : sizeof(uint16_t);
  out.clear();
  for (size_t s = layers_[layer].first_slot; s < layers_[layer].first_slot + layers_[layer].num_slots; ++s) {
    const ParamSlot& slot = slots_[s];
    out.push_back(slot.owner >= 0
                      ? ds_tensor{tied_base ? const_cast<float*>(tied_base + slot.tied_offset) : nullptr, DS_F32,
                                  slot.shape, DS_DEVICE_CPU}
                      : ds_tensor{layer_base ? const_cast<std::byte*>(static_cast<const std::byte*>(layer_base) +
                                                                       (slot.offset - begin) * elem)
                                                 : nullptr,
                                  type, slot.shape, DS_DEVICE_CPU});
  }
}

std::byte* Engine::layer_in_unit(void* unit_base, size_t layer, size_t elem) const {
  return static_cast<std::byte*>(unit_base) + (layout_->layer_begin(layer) - layout_->unit_of_layer(layer).begin) * elem;
}

// Training uses the stage 3 fetcher (prefetching in the step's fixed order of use); evaluation and
// prediction gather each layer on the spot (a forward-only pass has another order).
const float* Engine::acquire_params(size_t layer, bool training) {
  const std::byte* stored = acquire_stored(layer, training);
  if (config_.precision == amp::Storage::F32) return reinterpret_cast<const float*>(stored);
  cpu::to_float(config_.precision, stored, param_scratch_.data(), layers_[layer].size);
  return param_scratch_.data();
}

Engine::CallParams Engine::call_params(size_t layer, bool training) {
  if (config_.precision != amp::Storage::F32 && device_layers_ && !device_layers_->keeps_params() && !owns_tied(layer))
    return {acquire_stored(layer, training), stored_type()};
  return {acquire_params(layer, training), DS_F32};
}

bool Engine::owns_tied(size_t layer) const {
  return std::any_of(slots_.begin(), slots_.end(), [&](const ParamSlot& s) { return s.owner >= 0 && owns(layer, s); });
}

ds_dtype Engine::stored_type() const {
  return config_.precision == amp::Storage::F32 ? DS_F32 : config_.precision == amp::Storage::BF16 ? DS_BF16 : DS_F16;
}

const std::byte* Engine::acquire_stored(size_t layer, bool training) {
  const zero::Unit& unit = layout_->unit_of_layer(layer);
  void* base = params_.data() + unit.begin * elem_;
  if (fetcher_ && training) {
    base = const_cast<void*>(fetcher_->acquire(layer));
  } else if (fetcher_) {
    inference_unit_.resize(unit.padded() * elem_);
    const size_t index = layout_->unit_index(layer);
    const std::byte* chunk = chunks_->in_memory(index);
    if (!chunk && unit.chunk > 0) {  // swapped: read at once
      chunk_scratch_.resize(unit.chunk * elem_);
      param_swapper_->read_now(index, chunk_scratch_.data());
      chunk = chunk_scratch_.data();
    }
    if (unit.chunk > 0)
      group_.allgather(chunk, inference_unit_.data(), unit.chunk, zero::collective_type(config_.precision));
    base = inference_unit_.data();
  }
  return layer_in_unit(base, layer, elem_);
}

void Engine::release_params(size_t layer, bool training) {
  if (fetcher_ && training) fetcher_->release(layer);
}

float* Engine::layer_grads(size_t layer) {
  if (device_step_) return nullptr;  // the device keeps them: the views give only their shapes
  if (config_.grad_storage == amp::Storage::F32)
    return reinterpret_cast<float*>(layer_in_unit(grads_->unit_grads(layout_->unit_index(layer)), layer, sizeof(float)));
  PageVector<float>& scratch = grad_scratch(layer);
  std::fill_n(scratch.data(), layers_[layer].size, 0.0f);
  return scratch.data();
}

void Engine::store_grads(size_t layer) {
  if (config_.grad_storage == amp::Storage::F32) return;
  std::byte* grads = layer_in_unit(grads_->unit_grads(layout_->unit_index(layer)), layer, amp::storage_bytes(config_.grad_storage));
  cpu::add_float(config_.grad_storage, grad_scratch(layer).data(), grads, layers_[layer].size);
}

bool Engine::owns(size_t layer, const ParamSlot& tied) const {
  const auto owner = static_cast<size_t>(tied.owner);
  return owner >= layers_[layer].first_slot && owner < layers_[layer].first_slot + layers_[layer].num_slots;
}

void Engine::copy_tied_values(size_t layer, const float* params) {
  const size_t begin = layout_->layer_begin(layer);
  for (const ParamSlot& slot : slots_)
    if (slot.owner >= 0 && owns(layer, slot))
      std::copy_n(params + (slot.offset - begin), slot.size, tied_values_.data() + slot.tied_offset);
}

void Engine::take_tied_grads(size_t layer, float* grads) {
  const size_t begin = layout_->layer_begin(layer);
  for (const ParamSlot& slot : slots_) {
    if (slot.owner < 0 || !owns(layer, slot)) continue;
    float* from = tied_grads_.data() + slot.tied_offset;
    float* to = grads + (slot.offset - begin);
    for (size_t k = 0; k < slot.size; ++k) {
      to[k] += from[k];
      from[k] = 0.0f;
    }
  }
}

float* Engine::workspace(size_t layer) {
  return config_.recompute ? shared_workspace_.data() : current().workspaces[layer].data();
}

// A layer's output shape for the rows of the forward pass under way: the batch dimension comes
// first (ds_plugin.h), so fewer rows use a prefix of each buffer; the last layer's (the loss) is fixed.
ds_shape Engine::output_shape(size_t layer) const {
  ds_shape shape = layers_[layer].output_shape;
  if (layer + 1 < layers_.size() || !last_stage()) shape.dims[0] = rows_;
  return shape;
}

ds_tensor Engine::layer_input(size_t layer, const ds_batch& batch) const {
  if (layer == 0 && first_stage()) return *batch.input;
  if (layer == 0)
    return ds_tensor{const_cast<float*>(current().stage_input.data()), DS_F32, with_rows(layers_[0].input_shape, rows_),
                     DS_DEVICE_CPU};
  return ds_tensor{const_cast<float*>(current().outputs[layer - 1].data()), DS_F32, output_shape(layer - 1), DS_DEVICE_CPU};
}

void Engine::forward_layer(size_t i, CallParams params, const ds_batch& batch, bool recompute) {
  std::vector<float>& out = current().outputs[i];
  const bool held = device_holds_params(i);  // then `params` is not needed (nullptr)
  if (!held) views(params.data, tied_values_.data(), i, param_views_, params.type);
  if (device_layers_) {  // it rounds on the device
    device_layers_->forward(i, held ? nullptr : &param_views_, output_shape(i), batch, out.data(), recompute);
    return;
  }
  ds_tensor output{out.data(), DS_F32, output_shape(i), DS_DEVICE_CPU};
  plugin_.forward(plugin_layer(i), param_views_.data(), layer_input(i, batch), output, workspace(i), batch);
  if (i + 1 < layers_.size() || !last_stage()) cpu::round_to(config_.precision, out.data(), out.size());  // the loss stays fp32
}

// Stages 0-2 on a device, at a pass's first forward: every layer's parameters start for the device
// at once, on its copy stream, in their stored precision (the device widens 16-bit ones), so the
// uploads overlap the forward pass. A tied parameter's fp32 values are taken from its owner first.
void Engine::prefetch_device_params(bool training) {
  hold_upload_sources(true);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (owns_tied(i)) copy_tied_values(i, acquire_params(i, training));
    views(layer_in_unit(params_.data() + layout_->unit_of_layer(i).begin * elem_, i, elem_), tied_values_.data(), i,
          param_views_, stored_type());
    device_layers_->prefetch_params(i, param_views_);
  }
}

void Engine::acquire_on_device(size_t layer, std::optional<size_t> next) {
  if (!device_gather_->loaded()) device_gather_->load(params_.data());  // this rank's partition, as stored
  device_gather_->acquire(layer, next);
}

void Engine::forward(const ds_batch& batch, bool training) {
  const bool upload = device_layers_ && device_layers_->keeps_params() && !device_holds_params(0);
  if (upload) prefetch_device_params(training);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (device_gather_) acquire_on_device(i, i + 1 < layers_.size() ? std::optional<size_t>(i + 1) : std::nullopt);
    if (device_holds_params(i)) {
      forward_layer(i, CallParams{}, batch);
      continue;
    }
    const CallParams params = call_params(i, training);
    if (params.type == DS_F32) copy_tied_values(i, static_cast<const float*>(params.data));  // (owners are fp32)
    forward_layer(i, params, batch);
    release_params(i, training);
  }
  if (upload && device_step_) hold_upload_sources(false);  // uploaded (the last layer waited): the device updates them
}

// 16-bit training's fp32 layer scratch and the tied parameters' fp32 copies, which the host's layer calls
// and the device's uploads read. With the optimizer on the device they exist only for an upload.
void Engine::hold_upload_sources(bool held) {
  if (!held) {
    free_storage(param_scratch_);
    free_storage(tied_values_);
    return;
  }
  if (param_scratch_.size() != param_scratch_elems_) param_scratch_.assign(param_scratch_elems_, 0.0f);
  if (tied_values_.size() != tied_elems_) tied_values_.assign(tied_elems_, 0.0f);
}

// Backward through every layer, last to first, from d(loss)/d(loss) = loss scale / GAS. With
// recompute, each layer's forward runs again first, to refill the shared workspace (the last
// layer's is still there). A unit's gradients are final for this micro-batch once the backward of
// its first layer returns; the reducer then starts their reduction.
const float* Engine::backward(const ds_batch& batch, bool last_micro_batch, double scale) {
  float loss_grad = static_cast<float>(scale / static_cast<double>(config_.grad_accum));
  ds_tensor grad_output{&loss_grad, DS_F32, layers_.back().output_shape, DS_DEVICE_CPU};
  if (!last_stage()) grad_output.data = current().grad_output.data();  // from the next stage, unscaled
  std::vector<float>* next = &grad_a_;
  // With a device, a layer's gradients come back while the layer below runs there: the host's part of
  // layer i (finish_backward) follows the launch of layer i - 1 in the same unit (stages 2-3 fill one
  // unit's bucket at a time).
  std::optional<std::pair<size_t, float*>> pending;  // the layer, its gradients
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& layer = layers_[i];
    const size_t unit = layout_->unit_index(i);
    if (pending && layout_->unit_index(pending->first) != unit) {
      finish_backward(pending->first, pending->second, last_micro_batch);
      pending.reset();
    }
    if (device_gather_) acquire_on_device(i, i > 0 ? std::optional<size_t>(i - 1) : std::nullopt);
    const bool on_device = device_holds_params(i);
    const CallParams params = on_device ? CallParams{} : call_params(i, true);
    if (config_.recompute && (i + 1 < layers_.size() || !last_stage())) forward_layer(i, params, batch, true);
    float* grads = layer_grads(i);
    if (!on_device) views(params.data, tied_values_.data(), i, param_views_, params.type);
    views(grads, tied_grads_.data(), i, grad_views_);
    ds_tensor output{current().outputs[i].data(), DS_F32, layer.output_shape, DS_DEVICE_CPU};
    ds_tensor grad_input{next->data(), DS_F32, layer.input_shape, DS_DEVICE_CPU};
    const bool input_grad = i > 0 || !first_stage();
    if (device_layers_) {
      // Gradients that hold zeros are zeroed on the device rather than uploaded: 16-bit training's fp32
      // scratch (layer_grads), and fp32 gradients the step (stages 0-1) or micro-batch (2-3) has not yet
      // added into. Tied ones may hold other layers' sums.
      // With the device's own sums (stages 0-1 in fp32), fresh gradients start them.
      const bool fresh = config_.grad_storage != amp::Storage::F32 || grads_->fresh(unit);
      grad_sync_.zeroed.clear();
      for (size_t s = layer.first_slot; s < layer.first_slot + layer.num_slots; ++s)
        grad_sync_.zeroed.push_back(fresh && slots_[s].owner < 0);
      grad_sync_.first = device_step_ ? micro_ == 0 || device_step_->partitions_grads() : grads_->fresh(unit);
      grad_sync_.last = last_micro_batch && !device_step_;  // the device's step reads them there
      device_layers_->backward(i, on_device ? nullptr : &param_views_, grad_views_, grad_sync_, loss_grad, batch);
    } else {
      plugin_.backward(plugin_layer(i), param_views_.data(), layer_input(i, batch), output, grad_output,
                       input_grad ? &grad_input : nullptr, grad_views_.data(), workspace(i), batch);
      if (input_grad) cpu::round_to(config_.precision, next->data(), elements(layer.input_shape));
    }
    if (!on_device) release_params(i, true);
    if (device_layers_) {
      if (pending) finish_backward(pending->first, pending->second, last_micro_batch);
      pending = {i, grads};
    } else {
      finish_backward(i, grads, last_micro_batch);
    }
    grad_output = grad_input;
    next = next == &grad_a_ ? &grad_b_ : &grad_a_;
  }
  if (pending) finish_backward(pending->first, pending->second, last_micro_batch);
  if (device_step_ && !last_micro_batch) device_step_->end_micro_batch(grads_->pre_scale());
  return first_stage() ? nullptr : static_cast<const float*>(grad_output.data);
}

void Engine::finish_backward(size_t layer, float* grads, bool last_micro_batch) {
  const size_t unit = layout_->unit_index(layer);
  const bool unit_done = layout_->units()[unit].first_layer == layer;
  if (device_step_) {  // the gradients stay on the device, where the step's last pass (stage 2: each) starts their sums
    if (unit_done && (last_micro_batch || device_step_->partitions_grads()))
      device_step_->unit_done(unit, grads_->pre_scale());
    return;
  }
  if (device_layers_) device_layers_->wait_grads(layer);
  take_tied_grads(layer, grads);
  store_grads(layer);
  if (unit_done) grads_->unit_done(unit, last_micro_batch);
}

double Engine::evaluate(Dataset& data, int64_t max_samples) {
  const ds_dataset_info info = data.info();
  check_samples(data_info(), info, plugin_.name());
  std::optional<SequenceSlice> sliced;  // sequence parallelism: this rank's chunks of the samples
  if (config_.sequence_parallel) sliced.emplace(data, config_.sequence_parallel->rank(), config_.sequence_parallel->size());
  Dataset& source = sliced ? *sliced : data;
  const int64_t world = data_ranks(), mb = config_.micro_batch;
  const int64_t batches = std::min(info.num_samples, max_samples) / world / mb;
  if (batches == 0)
    throw ConfigError(fmt::format("evaluation data: {} samples (at most {} used) are fewer than one micro-batch of {} "
                                  "on each of {} ranks", info.num_samples, max_samples, mb, world));
  buffer_ = 0;
  if (device_layers_ && !device_step_) device_layers_->forget_params();  // (device_step_: updated there)
  MicroBatch& m = current();
  ds_tensor input{m.input.data(), data_.input_dtype, batched(mb, data_.input_shape), DS_DEVICE_CPU};
  ds_tensor target{m.target.data(), data_.target_dtype, batched(mb, data_.target_shape), DS_DEVICE_CPU};
  std::vector<int64_t> indices(static_cast<size_t>(mb));
  double loss = 0.0;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t k = 0; k < mb; ++k) indices[static_cast<size_t>(k)] = data_rank() + (b * mb + k) * world;
    source.get_batch(indices.data(), mb, input, target);
    if (config_.cast_inputs && data_.input_dtype == DS_F32) cpu::round_to(config_.precision, m.input.data(), m.input.size());
    ds_batch batch{&input, &target, steps_, 0, nullptr};
    if (config_.pipeline) pipeline_forward(batch);
    else forward(batch, false);
    if (last_stage()) loss += m.outputs.back()[0];
  }
  loss /= static_cast<double>(batches);
  if (group_.size() > 1) group_.allreduce(&loss, 1, DataType::F64, ReduceOp::Avg);
  if (config_.pipeline) config_.pipeline->pipe().broadcast(&loss, 1, DataType::F64, config_.pipeline->stages() - 1);
  return loss;
}

ds_shape Engine::predictions_shape() const {
  ds_shape shape = plugin_.predictions_shape(batched(config_.micro_batch, data_.input_shape));
  if (shape.ndim >= 2) shape.dims[1] *= sequence_parallel_size();  // gathered from the sequence-parallel ranks
  return shape;
}

std::vector<float> Engine::predict(const ds_tensor& input_batch) {
  const ds_dataset_info& whole = data_info();  // samples as given, before any cut
  const int64_t rows = input_batch.shape.ndim > 0 ? input_batch.shape.dims[0] : 0;
  if (input_batch.dtype != data_.input_dtype || rows < 1 || rows > config_.micro_batch ||
      !same_shape(input_batch.shape, batched(rows, whole.input_shape)))
    throw std::invalid_argument(fmt::format("engine: predict needs 1 to {} samples of {}, not {}", config_.micro_batch,
                                            shape_text(whole.input_shape), shape_text(input_batch.shape)));
  const ds_shape local_input = batched(rows, data_.input_shape);
  const ds_shape shape = plugin_.predictions_shape(local_input);
  if (shape.ndim == 0) throw PluginError(fmt::format("plugin {}: the model makes no predictions", plugin_.path()));
  buffer_ = 0;
  MicroBatch& m = current();
  const size_t n = elements(local_input);
  if (sliced_)
    sliced_->cut_input(input_batch.data, m.input.data(), rows);
  else
    std::memcpy(m.input.data(), input_batch.data, n * sizeof(float));
  if (config_.cast_inputs && data_.input_dtype == DS_F32) cpu::round_to(config_.precision, m.input.data(), n);
  ds_tensor input{m.input.data(), data_.input_dtype, local_input, DS_DEVICE_CPU};
  std::fill(m.target.begin(), m.target.end(), 0);  // class / token 0: a valid target, unused
  ds_tensor target{m.target.data(), data_.target_dtype, batched(rows, data_.target_shape), DS_DEVICE_CPU};
  std::vector<float> out(elements(shape));
  ds_tensor predictions{out.data(), DS_F32, shape, DS_DEVICE_CPU};
  ds_batch batch{&input, &target, steps_, 0, &predictions};
  rows_ = rows;
  if (device_layers_ && !device_step_) device_layers_->forget_params();  // (device_step_: updated there)
  try {
    if (config_.pipeline) pipeline_forward(batch);
    else forward(batch, false);
  } catch (...) {
    rows_ = config_.micro_batch;
    throw;
  }
  rows_ = config_.micro_batch;
  if (config_.pipeline)  // the last stage's layer made them
    config_.pipeline->pipe().broadcast(out.data(), out.size(), DataType::F32, config_.pipeline->stages() - 1);
  if (!sliced_) return out;
  // Sequence parallelism: every rank's positions, [S, rows, T, ...] → [rows, S·T, ...].
  const int ranks = config_.sequence_parallel->size();
  std::vector<float> chunks(out.size() * static_cast<size_t>(ranks)), joined(chunks.size());
  config_.sequence_parallel->allgather(out.data(), chunks.data(), out.size(), DataType::F32);
  join_sequence_chunks(chunks.data(), joined.data(), rows, shape.dims[1] * ranks,
                       static_cast<int64_t>(out.size()) / (rows * shape.dims[1]), sizeof(float), ranks);
  return joined;
}

ds_batch Engine::load_micro_batch(int64_t epoch, int64_t within, int64_t micro, ds_tensor& input, ds_tensor& target) {
  const int64_t mb = config_.micro_batch;
  MicroBatch& m = current();
  input = ds_tensor{m.input.data(), data_.input_dtype, batched(mb, data_.input_shape), DS_DEVICE_CPU};
  target = ds_tensor{m.target.data(), data_.target_dtype, batched(mb, data_.target_shape), DS_DEVICE_CPU};
  std::vector<int64_t> indices = sampler_.indices(epoch, (within * config_.grad_accum + micro) * mb, mb);
  dataset_.get_batch(indices.data(), mb, input, target);
  if (config_.cast_inputs && data_.input_dtype == DS_F32) cpu::round_to(config_.precision, m.input.data(), m.input.size());
  return ds_batch{&input, &target, steps_ + 1, static_cast<int32_t>(micro), nullptr};
}

StepStats Engine::step() {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const auto start = Clock::now();
  StepStats stats;
  StepStats::Phases& phases = stats.phases;
  const int64_t epoch = steps_ / steps_per_epoch_;
  const int64_t within = steps_ % steps_per_epoch_;
  const double scale = loss_scale();
  const uint64_t sent_before = group_.comms().sent_bytes() + (config_.pipeline ? config_.pipeline->sent_bytes() : 0);
  const bool averaged = optimizer_->wants_averaged_gradients(updates_ + 1);
  if (!averaged && policy_.optimizer_state)
    throw std::logic_error("engine: an optimizer that averages its own gradients needs ZeRO stage 0");
  if (!averaged && config_.pipeline)
    throw ConfigError("optimizer: the 1-bit optimizers' own gradient exchange does not run with pipeline parallelism");
  if (device_step_) {
    device_step_->begin_step();
  } else {
    grads_->begin_step(averaged);
    if (device_layers_) device_layers_->forget_params();  // updated since they were uploaded
  }
  if (swapper_) swapper_->prefetch();  // the update's first sub-groups, read during forward and backward

  double loss_sum = 0.0, schedule_seconds = 0.0, compute_seconds = 0.0;
  if (config_.pipeline) {
    const auto schedule_start = Clock::now();
    loss_sum = pipeline_micro_batches(epoch, within, scale, compute_seconds);
    schedule_seconds = seconds_since(schedule_start);
  } else {
    ds_tensor input, target;
    for (int64_t m = 0; m < config_.grad_accum; ++m) {
      micro_ = m;
      const ds_batch batch = load_micro_batch(epoch, within, m, input, target);
      const auto forward_start = Clock::now();
      forward(batch, true);
      loss_sum += current().outputs.back()[0];
      phases.forward += seconds_since(forward_start);
      const auto backward_start = Clock::now();
      backward(batch, m == config_.grad_accum - 1, scale);
      end_phase();
      phases.backward_inner += seconds_since(backward_start);
    }
  }
  const auto reduce_start = Clock::now();
  if (config_.pipeline) reduce_pipeline_gradients();
  if (device_step_) device_step_->finish_gradients(grads_->pre_scale(), grads_->post_scale());
  else grads_->finish();
  end_phase();
  phases.backward_allreduce = seconds_since(reduce_start);
  const auto update_start = Clock::now();
  const double norm = gradient_norm(averaged) / scale;
  ++steps_;
  stats.step = steps_;
  stats.epoch = epoch;
  stats.grad_norm = norm;
  stats.loss_scale = scale;
  stats.lr = schedule_->lr(updates_ + 1);
  const bool overflow = !std::isfinite(norm);
  if (overflow && !scaler_ && !config_.skip_overflow_steps)
    throw std::runtime_error(fmt::format("step {}: the gradient norm is {}; {} training has no loss scaling to skip "
                                         "such a step (fp16 has; bf16 skips it with bf16.check_grad_overflow); "
                                         "stopping",
                                         steps_, norm, storage_name(config_.precision)));
  if (scaler_) {
    try {
      stats.skipped = scaler_->update(overflow).skipped;
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("step {}: {}", steps_, e.what()));
    }
  } else {
    stats.skipped = overflow;
  }
  if (!stats.skipped) update(norm, scale, stats.lr);
  else if (fetcher_) fetcher_->end_step();

  double loss = loss_sum / static_cast<double>(config_.grad_accum);
  if (group_.size() > 1) group_.allreduce(&loss, 1, DataType::F64, ReduceOp::Avg);
  if (config_.pipeline) config_.pipeline->pipe().broadcast(&loss, 1, DataType::F64, config_.pipeline->stages() - 1);
  stats.loss = loss;
  stats.samples = global_batch();
  stats.averaged = averaged;
  stats.schedule_seconds = schedule_seconds;
  stats.compute_seconds = compute_seconds;
  stats.sent_bytes = group_.comms().sent_bytes() + (config_.pipeline ? config_.pipeline->sent_bytes() : 0) - sent_before;
  end_phase();
  phases.step = seconds_since(update_start);
  stats.seconds = seconds_since(start);
  return stats;
}

void Engine::end_phase() {
  if (config_.timed_phases && config_.device) config_.device->synchronize();
}

// The global L2 norm of the averaged (still loss-scaled) gradient: this rank's sum of squares over
// what it owns, summed across ranks when partitioned. Non-finite when any rank holds a non-finite
// gradient, so every rank takes the same decision on overflow without another collective.
// Unaveraged gradients: √(Σ_ranks ‖gᵣ‖² / W), one 8-byte all-reduce, for the same reason.
double Engine::gradient_norm(bool averaged) {
  double sum_sq = device_step_ ? device_step_->sum_squares() : grads_->owned_sum_of_squares();
  if (config_.pipeline) sum_sq = std::max(0.0, sum_sq - owned_sum_of_squares([](const ParamSlot& s) { return s.replica; }));
  if (config_.tensor_parallel) {  // the shares summed over the group, the replicated parameters counted once
    double shares = owned_sum_of_squares([](const ParamSlot& s) { return s.shard.dim >= 0 && !s.replica; });
    sum_sq = std::max(0.0, sum_sq - shares);
    config_.tensor_parallel->allreduce(&shares, 1, DataType::F64, ReduceOp::Sum);
    sum_sq += shares;
  }
  if ((policy_.optimizer_state || !averaged) && group_.size() > 1)
    group_.allreduce(&sum_sq, 1, DataType::F64, ReduceOp::Sum);
  if (!averaged) sum_sq /= group_.size();
  if (config_.pipeline) config_.pipeline->pipe().allreduce(&sum_sq, 1, DataType::F64, ReduceOp::Sum);
  return std::sqrt(sum_sq);
}

// After the data-parallel reduction.
double Engine::owned_sum_of_squares(const std::function<bool(const ParamSlot&)>& pick) {
  double sum = 0.0;
  for (size_t layer = 0; layer < layers_.size(); ++layer) {
    const zero::Unit& unit = layout_->unit_of_layer(layer);
    for (size_t s = layers_[layer].first_slot; s < layers_[layer].first_slot + layers_[layer].num_slots; ++s) {
      if (slots_[s].owner >= 0 || !pick(slots_[s])) continue;
      const zero::Range mine = layout_->owned_part(slots_[s].offset, slots_[s].size);
      if (mine.size == 0) continue;
      const auto* grads = static_cast<const std::byte*>(grads_->owned_grads(unit)) +
                          (mine.offset - unit.part_offset) * amp::storage_bytes(config_.grad_storage);
      sum = cpu::sum_squares(config_.grad_storage, grads, mine.size, sum);
    }
  }
  return sum;
}

// Unscales and clips the gradients this rank updates with (one factor: clip coefficient / loss
// scale), updates the fp32 parameters, rounds them back into the 16-bit copy, and rebuilds the full
// parameters (stages 1-2) or the persistent layers (stage 3). A fused update (build_segments) does
// the first three in the optimizer's one pass; otherwise the factor is applied while converting
// 16-bit gradients to fp32 (or in place), and the master rounded after the step.
void Engine::update(double norm, double scale, double lr) {
  const double coef = config_.gradient_clipping > 0.0 ? std::min(1.0, config_.gradient_clipping / (norm + 1e-6)) : 1.0;
  const double factor = coef / scale;
  if (device_step_) {  // the gradients, parameters and state are on the device
    ++updates_;
    if (!device_step_->loaded()) device_step_->load(master_.empty() ? nullptr : master_.data(), optimizer_->state());
    device_step_->update(*optimizer_->device_update(lr, updates_), factor);
    host_stale_ = true;
    release_host_state();
    return;
  }
  if (fused_update_) {
    for (Segment& s : segments_) s.grad_scale = factor;  // applied as the optimizer reads them
  } else if (grads32_.empty()) {
    if (factor != 1.0) grads_->scale_owned(factor);  // in place, in their storage
  } else {
    for (const zero::Unit& u : layout_->units()) {
      float* g = grads32_.data() + u.part_offset;
      cpu::to_float(config_.grad_storage, grads_->owned_grads(u), g, u.chunk);
      cpu::scale(amp::Storage::F32, g, u.chunk, factor);
    }
  }
  ++updates_;
  if (swapper_) update_swapped(lr);
  else optimizer_->step(segments_, tensor_ranges_, lr, updates_);
  if (!master_.empty() && !fused_update_)
    for (const zero::Unit& u : layout_->units()) put_params(u, 0, master_.data() + u.part_offset, u.chunk);
  if (policy_.parameters) {
    fetcher_->end_step();
    return;
  }
  if (!policy_.optimizer_state || group_.size() == 1) return;
  std::vector<std::unique_ptr<Work>> gathers;  // stages 1-2: every unit rebuilt from its chunks, in place
  for (const zero::Unit& u : layout_->units())
    if (u.chunk > 0)
      gathers.push_back(group_.allgather_async(owned_params(u), params_.data() + u.begin * elem_, u.chunk,
                                               zero::collective_type(config_.precision)));
  for (auto& work : gathers) work->wait();
}

// Unit by unit: the fp32 parameters where a rank holds them all (one rank, or stage 0), else
// every rank's fp32 chunk gathered.
std::vector<float> Engine::gather_parameters() {
  std::vector<float> out;
  out.reserve(num_params_);
  std::vector<float> unit_data, mine;
  read_partition(mine, nullptr);
  const bool partitioned = layout_->world() > 1;
  for (const zero::Unit& u : layout_->units()) {
    const float* base = mine.data() + u.part_offset;
    if (partitioned) {
      unit_data.resize(u.padded());
      if (u.chunk > 0) group_.allgather(base, unit_data.data(), u.chunk, DataType::F32);
      base = unit_data.data();
    }
    for (size_t s = layers_[u.first_layer].first_slot; s < layers_[u.end_layer - 1].first_slot + layers_[u.end_layer - 1].num_slots; ++s)
      if (slots_[s].owner < 0) out.insert(out.end(), base + (slots_[s].offset - u.begin), base + (slots_[s].offset - u.begin) + slots_[s].size);
  }
  return out;
}

MemoryReport Engine::memory() const {  // (capacities: what the buffers hold allocated)
  MemoryReport r;
  r.params = params_.capacity();
  if (param_swapper_) {
    r.params += param_swapper_->memory_bytes() + param_swapper_->buffer_bytes();
    r.nvme_params = param_swapper_->file_bytes();
  }
  if (fetcher_) r.params += fetcher_->pooled_bytes() + fetcher_->persistent_bytes();
  r.grads = grads_->bytes();
  for (const StateView& v : optimizer_->state())
    if (v.data != nullptr) r.optimizer_state += v.size * amp::storage_bytes(v.storage);  // (else on the device only)
  if (swapper_) {
    r.optimizer_state += swapper_->buffer_bytes();
    r.nvme = swapper_->file_bytes();
  }
  r.optimizer_state += optimizer_->extra_bytes();
  r.optimizer_state += master_.capacity() * sizeof(float);
  r.activations = (grad_a_.capacity() + grad_b_.capacity()) * sizeof(float);
  r.workspace = (grads32_.capacity() + param_scratch_.capacity() + grad_scratch_[0].capacity() + grad_scratch_[1].capacity() + shared_workspace_.capacity() +
                 tied_values_.capacity() + tied_grads_.capacity()) * sizeof(float) + inference_unit_.capacity() +
                chunk_scratch_.capacity();
  for (const MicroBatch& m : in_flight_) {
    r.activations += (m.input.capacity() + m.target.capacity() + m.stage_input.capacity() + m.grad_output.capacity() +
                      m.grad_input.capacity()) * sizeof(float);
    for (const auto& out : m.outputs) r.activations += out.capacity() * sizeof(float);
    for (const auto& ws : m.workspaces) r.workspace += ws.capacity() * sizeof(float);
  }
  return r;
}

MemoryReport Engine::peak_memory() const {
  MemoryReport r = memory();
  r.keep_larger(freed_peak_);
  return r;
}

std::optional<MemoryReport> Engine::device_memory() const {
  if (!device_layers_) return std::nullopt;
  MemoryReport r = device_layers_->memory();
  if (device_step_) {
    const MemoryReport& step = device_step_->memory();
    r.params += step.params;
    r.grads += step.grads;
    r.optimizer_state += step.optimizer_state;
    r.workspace += step.workspace;
  }
  if (device_gather_) r.params += device_gather_->memory().params;
  return r;
}

}  // namespace ds
