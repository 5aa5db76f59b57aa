// The training engine: owns every parameter, gradient, activation and optimizer buffer, and runs
// one optimizer step at a time: GAS micro-batches of forward and backward through the plugin's
// layers, gradient averaging across data-parallel ranks, clipping by global norm, the optimizer
// update and the LR schedule. Deterministic: same seed, same world size → bit-identical runs on CPU.
//
// ZeRO (runtime/zero/layout.h has the partition layout, per unit of layers):
//   stage 0  every rank keeps everything; gradients are all-reduced unit by unit, overlapped with
//            the last micro-batch's backward;
//   stage 1  the optimizer state exists for this rank's partition only; on the last micro-batch
//            each unit's gradients are reduce-scattered as backward finishes it; the rank updates
//            its partition; the updated chunks are all-gathered;
//   stage 2  as stage 1, and the gradients are partitioned too: each micro-batch's gradients are
//            reduce-scattered from a bucket into this rank's gradient partition;
//   stage 3  as stage 2, and the parameters are partitioned too: a layer's parameters are
//            all-gathered just before its forward or backward and released after
//            (runtime/zero/param_fetcher.h).
// Per rank and step (one micro-batch), stages 0–2 move 2Ψ(W−1)/W elements, stage 3 3Ψ(W−1)/W.
//
// Mixed precision (fp16 or bf16 `precision`): the parameters the layers use are stored in 16 bits
// (full buffer at stages 0-2, the partition at stage 3) beside an fp32 master copy of this rank's
// partition [P], which the optimizer updates and which is rounded back into the 16-bit parameters
// after each update. Gradients are accumulated and reduced in `grad_storage` (grad_accum_dtype) and
// converted to fp32 for the optimizer. With `low_precision_master` (bf16_master_weights_and_grads,
// stages 1-3) there are no fp32 copies: the optimizer updates this rank's bf16 parameter chunks in
// place from the gradients as they are stored, 8 bytes less per element of [P]. The plugin ABI is
// fp32: a layer's parameters are converted to an fp32 scratch copy before it runs, its gradients
// land in an fp32 scratch and are added into the 16-bit gradients after, and its outputs and input
// gradients are rounded to `precision` (the values a 16-bit activation can hold; the buffers stay
// fp32 on CPU). fp16 multiplies the loss by
// the loss scale before backward; a non-finite gradient norm (summed across ranks, so every rank
// agrees) skips the step: no optimizer or LR update, the step still counts.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/storage.h"
#include "comm/process_group.h"
#include "core/page_vector.h"
#include "data/dataset.h"
#include "backend/backend.h"
#include "engine/device_gather.h"
#include "engine/device_layers.h"
#include "engine/device_step.h"
#include "engine/memory_report.h"
#include "engine/model_collectives.h"
#include "engine/sampler.h"
#include "engine/sequence_slice.h"
#include "offload/param_swapper.h"
#include "offload/state_swapper.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "pipe/links.h"
#include "plugin/plugin.h"
#include "zero/gradient_reducer.h"
#include "zero/layout.h"
#include "zero/param_fetcher.h"
#include "zero/policy.h"

namespace ds {

struct EngineConfig {
  int64_t micro_batch = 1;                  // samples per rank per micro-step
  int64_t grad_accum = 1;                   // micro-steps per optimizer step (GAS)
  double gradient_clipping = 0.0;           // max global L2 norm; 0 = off
  int zero_stage = 0;                          // 0..3 (see above)
  int64_t reduce_bucket_elems = 500000000;     // gradient elements per reduction (a unit, stages 0-2)
  int64_t allgather_bucket_elems = 500000000;  // parameter elements per all-gather (a unit, stages 1-2)
  bool overlap_comm = false;                   // stages 2-3: reduce a bucket while backward fills the next
  zero::FetchLimits stage3;                    // stage 3's prefetch, live cap and persistence
  bool prescale_gradients = false;          // divide by world size before summing (else after)
  double predivide_factor = 1.0;            // DeepSpeed's gradient_predivide_factor
  amp::Storage precision = amp::Storage::F32;     // parameters and activations (fp16.enabled / bf16.enabled)
  amp::Storage grad_storage = amp::Storage::F32;  // gradient accumulation and reduction (grad_accum_dtype)
  bool low_precision_master = false;        // bf16 precision at stages 1-3: the 16-bit parameters are the
                                            // master copy (bf16.bf16_master_weights_and_grads)
  std::optional<amp::LossScalerConfig> loss_scaling;  // fp16; none: scale 1, a non-finite gradient stops
  bool cast_inputs = false;                 // round floating inputs to `precision` (fp16.auto_cast)
  bool skip_overflow_steps = false;         // without loss scaling, a non-finite gradient skips the step
                                            // (bf16.check_grad_overflow) instead of stopping the run
  std::optional<offload::SwapConfig> nvme_offload;  // offload_optimizer device nvme (stages 1-3): the
                                            // optimizer state, and the fp32 master copy under 16-bit
                                            // precision, in a swap file, stepped sub-group by sub-group
  std::optional<offload::ParamSwapConfig> param_offload;  // offload_param device nvme (stage 3): the parameter
                                            // partition in a swap file, read in ahead of each gather; the
                                            // fp32 master copy is then kept apart (with the optimizer state)
  bool recompute = false;                   // activation checkpointing: one workspace shared by all
                                            // layers, each layer's forward re-run just before its backward
  bool pin_memory = true;                   // with a device: page-lock the host buffers its copies use
                                            // (zero_optimization.offload_*.pin_memory)
  backend::Device* device = nullptr;        // the layers run on this device (the plugin was created on its
                                            // backend); the engine's buffers stay on the host (device_layers.h).
                                            // nullptr: the CPU
  bool params_on_host = false;              // stage 3 with a device: offload_param device cpu, the partition
                                            // stays in host memory, and layers are gathered there
  bool optimizer_on_device = false;         // with a device: the optimizer steps there where it can (stages
                                            // 0-3, Adam/AdamW, SGD or Lamb with fp32 state: device_step.h);
                                            // else on the host, as ZeRO-Offload.
  bool timed_phases = false;                // with a device: wait for it at the end of each of a step's
                                            // phases (wall_clock_breakdown), so that StepStats::phases hold
                                            // the device's time, not only the host's issuing of its work
                                            // DeepSpeed's choice without offload_optimizer
  ProcessGroup* device_group = nullptr;     // with a device and several ranks: `group`'s ranks over the device's
                                            // memory (NCCL), which the device step's gradients are all-reduced
                                            // in (stage 0); without it the optimizer stays on the host
  pipe::StageLinks* pipeline = nullptr;     // pipeline parallelism: this rank is stage pipeline->stage();
                                            // the groups to the other stages (see above)
  ProcessGroup* tensor_parallel = nullptr;  // tensor parallelism: the group the plugin was split over
                                            // (Plugin::load's tp); `group` is then this rank's data-parallel
                                            // group, the ranks holding the same shares
  ProcessGroup* sequence_parallel = nullptr;  // sequence parallelism (DeepSpeed-Ulysses): the S ranks that split
                                            // each sequence (Plugin::load's sp); `group` is then the ranks of the
                                            // data-parallel and sequence-parallel coordinates, group rank =
                                            // data rank · S + sequence rank, which share the gradient average
                                            // and the ZeRO partitions (DeepSpeed's seq-data group)
  bool pipe_partitioned = true;             // pipeline x tensor parallelism: each tensor-parallel rank sends
  bool grad_partitioned = true;             // 1/T of an activation / gradient to the next stage, which
                                            // all-gathers them (DeepSpeed's pipeline keys, default true)
  std::vector<int> stage_bounds;            // with a pipeline: stage s holds the plugin's layers
                                            // [stage_bounds[s], stage_bounds[s + 1]) (pipe::partition)
  uint64_t seed = 42;                       // parameter init and data order
};

// One parameter tensor inside the flat buffers. A tied parameter (ds_plugin.h) has no storage of
// its own: `owner` is the slot it is, and the layer sees an fp32 copy taken at the owner's forward.
struct ParamSlot {
  std::string name;  // "<layer>.<param>"
  ds_shape shape;
  size_t offset = 0;  // elements from the start of the full (padded) flat buffer (the owner's, if tied)
  size_t size = 0;    // elements
  int64_t owner = -1;       // tied: the owner's slot index
  size_t tied_offset = 0;   // tied: where its values and gradients are in tied_values_ / tied_grads_
  size_t stream = 0;        // its initial values' random stream: its index among the whole model's slots
                            // (a replica's: its owner's)
  ds_init_kind init = DS_INIT_ZEROS;
  float a = 0.0f, b = 0.0f;  // the init's parameters (ParamInfo)
  bool replica = false;      // pipeline: a tied parameter whose owner is on an earlier stage, kept here
                             // as a copy of its own
  std::string tied_to;       // a tied parameter: its owner's full name (rules by name, as Muon's, go by it)
  std::vector<int> tie_stages;  // pipeline: the stages that hold this parameter or a replica of it, when
                                // more than one (their gradients are summed)
  size_t global_offset = 0;     // where its values are in the whole model's canonical flat order (a
                                // replica's: its owner's; see TrainingState)
  ds_shard shard{-1, 1};        // tensor parallelism: this rank holds a share of the full tensor (ds_plugin.h)
};

// A parameter tensor of the whole model, as checkpoints list them.
struct ModelTensor {
  std::string name;
  ds_shape shape;
};

struct StepStats {
  int64_t step = 0;          // optimizer steps taken, counted from 1
  int64_t epoch = 0;
  double loss = 0.0;         // mean over micro-batches and ranks
  double lr = 0.0;           // learning rate applied at this step
  double grad_norm = 0.0;    // global L2 norm of the averaged (unscaled) gradient, before clipping;
                             // unaveraged (see step()): √(Σ_ranks ‖own gradient‖² / W)
  double loss_scale = 1.0;   // the loss scale this step's backward used (1 without fp16)
  bool skipped = false;      // fp16 overflow: the step applied no update
  double seconds = 0.0;      // wall time of the step on this rank
  int64_t samples = 0;       // samples in the global batch
  uint64_t sent_bytes = 0;   // payload this rank sent during the step, every collective
  bool averaged = true;      // the engine averaged the gradients (off after a 1-bit optimizer's warm-up)
  double schedule_seconds = 0.0;  // pipeline: wall time of the step's micro-batches (1F1B), and within it
  double compute_seconds = 0.0;   // the time in this stage's forward and backward passes; the rest waited on
                                  // other stages (the bubble)
  // Where the step's wall time went, on this rank (wall_clock_breakdown prints it), summed over its
  // micro-batches: DeepSpeed's global timers. Without a pipeline: the forward passes; the backward passes
  // (backward_inner: the layers', the gradient reductions overlapping them) and then the wait for the
  // reductions to finish (backward_allreduce; backward() is the two together); the optimizer step (norm,
  // clipping, update, the parameters' all-gather). With a pipeline, schedule_seconds holds the forward
  // and backward passes, backward_allreduce the data-parallel reduction after them, and step the update.
  struct Phases {
    double forward = 0.0, backward_inner = 0.0, backward_allreduce = 0.0, step = 0.0;
    double backward() const { return backward_inner + backward_allreduce; }
  } phases;
};

// Builds the optimizer for the n parameters this rank updates (all of them at stage 0, its partition
// at stages 1-3), once the model's size is known; `reducer` sums per-tensor norms across ranks (Lamb).
// The 1-bit optimizers also need the process group: the factory passes it to make_optimizer.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(size_t n, NormReducer reducer)>;

// What a checkpoint holds of an engine, in the canonical flat order: every non-tied parameter tensor
// after the other in slot order, Ψ elements, no padding ("global" offsets). `tensors` maps "master"
// (the fp32 parameters the optimizer updates) and each optimizer state buffer ("exp_avg", …) to values.
struct TrainingState {
  int64_t steps = 0, updates = 0;  // optimizer steps taken (skipped included) and applied
  std::optional<amp::LossScaler::State> scaler;
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  // The optimizer's per-tensor numbers (Optimizer::scalar_state), the same on every rank.
  std::vector<std::pair<std::string, std::vector<double>>> scalars;
};

// One run of the flat order a rank holds: global [global, global + size) is its partition's
// [part, part + size).
struct OwnedRun {
  size_t global = 0, part = 0, size = 0;
};

class Engine {
 public:
  // Trains on `data` (it must outlive the engine), or on the plugin's own dataset when null.
  Engine(const EngineConfig& config, Plugin& plugin, ProcessGroup& group, const OptimizerFactory& make_optimizer,
         std::unique_ptr<LrSchedule> schedule, Dataset* data = nullptr);
  ~Engine();
  // Runs one optimizer step; throws on a plugin or communication error, or a non-finite gradient
  // without loss scaling, or an overflow at the minimum loss scale. When the optimizer does not want
  // averaged gradients (Optimizer::wants_averaged_gradients; stage 0 only) each rank updates with its
  // own; the squared norms are still summed across ranks, so every rank clips by the same factor
  // (from √(Σ‖gᵣ‖²/W)) and takes the same overflow decision.
  StepStats step();

  // The mean loss over the first `max_samples` samples of `data` that each rank takes (rank r takes
  // samples r, r+W, …, whole micro-batches only), forward only, averaged over ranks. `data` must
  // have the training data's sample shapes. A collective.
  double evaluate(Dataset& data, int64_t max_samples);
  // One forward pass over `input` ([n, *sample shape] with 1 <= n <= micro_batch, filled by the
  // caller) returning the last layer's predictions (Plugin::predictions_shape; e.g. logits
  // [n, seq_len, vocab]). A collective at stage 3.
  std::vector<float> predict(const ds_tensor& input);
  ds_shape predictions_shape() const;

  // Replaces the LR schedule (before the first step; a schedule whose length is known only once the
  // engine knows its steps per epoch).
  void set_lr_schedule(std::unique_ptr<LrSchedule> schedule) { schedule_ = std::move(schedule); }
  int64_t steps_taken() const { return steps_; }
  int64_t skipped_steps() const { return steps_ - updates_; }
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }  // for the next step
  // Optimizer steps in one pass over the data: floor(per-rank samples / (micro_batch · GAS)).
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t global_batch() const { return config_.micro_batch * config_.grad_accum * data_ranks(); }
  int64_t micro_batch() const { return config_.micro_batch; }
  int zero_stage() const { return config_.zero_stage; }
  int pipeline_stages() const { return config_.pipeline ? config_.pipeline->stages() : 1; }
  int tensor_parallel_size() const { return plugin_.tensor_parallel().size; }
  int sequence_parallel_size() const { return plugin_.sequence_parallel().size; }
  amp::Storage precision() const { return config_.precision; }
  // The training samples' dtypes and shapes (one whole sample as the data gives it, no batch dimension,
  // even where sequence parallelism cuts it) and their count.
  const ds_dataset_info& data_info() const { return sliced_ ? sliced_->whole() : data_; }
  size_t num_parameters() const { return num_params_; }  // this rank's stage's (with a pipeline), replicas included
  // Every parameter tensor of the whole model in the canonical flat order (tied ones once), Ψ elements
  // in all: on every stage.
  const std::vector<ModelTensor>& model_tensors() const { return model_tensors_; }
  size_t model_parameters() const { return model_params_; }
  // Every parameter in fp32 (the master copy under mixed precision), tensor after tensor in slot
  // order (Ψ elements, no padding). A collective at stages 1-3 with several ranks (every rank must
  // call it).
  std::vector<float> gather_parameters();

  // Checkpoints (runtime/checkpoint). The runs of the whole model's flat order this rank writes (every
  // rank its partition; without partitioning only data-parallel rank 0, which holds everything; with a
  // pipeline each stage its own tensors, not the replicas) and its state restricted to them (tensor
  // values concatenated run after run). No communication.
  std::vector<OwnedRun> checkpoint_runs() const;
  // This rank's index among the ranks that write a file (stage-major), or -1; how many write one.
  int checkpoint_writer() const;
  int checkpoint_writers() const;
  // Waits for every rank of the job (data-parallel, tensor-parallel and pipeline groups in turn).
  void barrier();
  TrainingState checkpoint_shard();
  // Replaces parameters, optimizer state, step counters and the loss scaler with `state`, whose
  // tensors hold all Ψ elements of the whole model (whatever world size, stage or pipeline wrote them). Throws ConfigError when
  // its tensor names or sizes do not match this engine's. A collective at stage 3 (persistent
  // layers are gathered again); no communication otherwise.
  void restore(const TrainingState& state);
  const std::vector<ParamSlot>& slots() const { return slots_; }
  const zero::PartitionLayout& layout() const { return *layout_; }
  MemoryReport memory() const;
  // memory() with each kind at the most it has held: the host frees its parameters (stages 0-2), master and
  // optimizer state after each update when the optimizer steps on the device, and makes them again for a
  // checkpoint.
  MemoryReport peak_memory() const;
  // With the layers on a device: the bytes the engine holds in its memory (the layers' buffers, and the
  // optimizer's when it steps there), at their peak so far.
  std::optional<MemoryReport> device_memory() const;
  // With a device: what the user should know of the set-up, e.g. host memory that could not be pinned;
  // empty when nothing.
  const std::string& device_note() const { return device_note_; }
  // With a device: where the optimizer steps, and if on the host although asked for the device, why.
  const std::string& optimizer_place() const { return optimizer_place_; }
  // Bytes and seconds of the NVMe swap file's I/O so far; none without NVMe offload.
  std::optional<offload::SwapStats> swap_stats() const {
    return swapper_ ? std::optional(swapper_->stats()) : std::nullopt;
  }
  // The same for the parameters' swap file; none without parameter offload (or when it all fits
  // in memory).
  std::optional<offload::SwapStats> param_swap_stats() const {
    return param_swapper_ && param_swapper_->file_bytes() > 0 ? std::optional(param_swapper_->stats()) : std::nullopt;
  }

 private:
  struct Layer {
    std::string name;
    size_t first_slot = 0, num_slots = 0;  // into slots_
    size_t size = 0;                       // parameter elements
    ds_shape input_shape{}, output_shape{};
  };
  // A micro-batch's data and activations: one without a pipeline; with one, a set per micro-batch in
  // flight on the stage.
  struct MicroBatch {
    std::vector<float> input;                    // [micro_batch, *input sample] (F32 or I32 bit patterns)
    std::vector<int32_t> target;                 // [micro_batch, *target sample] (I32 or F32 bit patterns)
    std::vector<std::vector<float>> outputs;     // per layer: its activation [micro_batch, ...] (device: the loss only)
    std::vector<std::vector<float>> workspaces;  // per layer; empty with recompute (shared_workspace_) or a device
    std::vector<float> stage_input;              // pipeline, after the first stage: the activation received
    std::vector<float> grad_output;              // pipeline, before the last stage: its gradient received
    std::vector<float> grad_input;               // pipeline, after the first stage: the input's gradient sent
    std::unique_ptr<Work> activation_sent, gradient_sent;  // pipeline: transfers from the buffers above
  };
  void build_layers();
  void build_device_layers();
  // Why the optimizer cannot step on the device (device_step.h); empty when it can.
  std::string device_step_blocker() const;
  void build_device_step();
  bool partitions_grads_on_device() const;
  bool uses_tied_values(size_t layer) const;  // some of its parameters are tied to another layer's
  void release_host_state();
  void hold_host_state();
  void hold_upload_sources(bool held);
  // The host's parameters, master and optimizer state brought up to date from the device's step.
  void sync_host();
  // timed_phases: waits for the device's work so far (the phase's end, as DeepSpeed's timers' events).
  void end_phase();
  void pin_device_copies();  // once the buffers exist
  void pin_for_device(std::span<std::byte> range);  // page-locks it, or counts it in device_note_
  void build_partition();
  void init_parameters();
  void initial_values(size_t slot, std::vector<float>& values) const;  // [slot size]
  void initial_chunk(size_t layer, std::vector<float>& chunk) const;  // stage 3: this rank's [chunk]
  void copy_owned_part(const ParamSlot& slot, const zero::Unit& u, const std::vector<float>& values, float* out,
                       size_t out_begin) const;
  void init_swapped(const std::function<const float*(const zero::Unit&)>& chunk_of);
  // training: through the stage 3 fetcher, and with backward to follow (else forward only).
  void forward(const ds_batch& batch, bool training);
  void prefetch_device_params(bool training);
  // Stage 3 with device_step_: layer `layer`'s parameters gathered on the device for its calls (the partition
  // loaded from the host first when the host's values are the latest), `next` prefetched.
  void acquire_on_device(size_t layer, std::optional<size_t> next);
  void build_device_gather();
  size_t layer_of_slot(size_t slot) const;  // the layer that holds slots_[slot]
  // A layer's parameters for one call: fp32 (widened on the host in 16-bit training), or as stored where the
  // device takes them so (stage 3 on a device in 16-bit training: half the bytes cross, and the device
  // widens them), except in a layer that owns a tied parameter, whose fp32 values the layers using it take.
  struct CallParams {
    const void* data = nullptr;
    ds_dtype type = DS_F32;
  };
  void forward_layer(size_t layer, CallParams params, const ds_batch& batch, bool recompute = false);
  float* workspace(size_t layer);
  ds_tensor layer_input(size_t layer, const ds_batch& batch) const;
  ds_shape output_shape(size_t layer) const;
  // Returns the gradient of the first layer's input (pipeline, after the first stage), else nullptr.
  const float* backward(const ds_batch& batch, bool last_micro_batch, double scale);
  // Pipeline (pipeline.cpp): the step's micro-batches in 1F1B order, returning the sum of their
  // losses (last stage; 0 elsewhere); the tied gradients summed across stages and the stage's reduced
  // across its data-parallel ranks; a forward-only pass through every stage, filling the last
  // stage's outputs.
  double pipeline_micro_batches(int64_t epoch, int64_t within, double scale, double& compute_seconds);
  void reduce_pipeline_gradients();
  void pipeline_forward(const ds_batch& batch);
  // With tensor parallelism, DeepSpeed's pipe_partitioned / grad_partitioned transfers: the part of an
  // n-element activation (or gradient) this tensor-parallel rank sends and receives, 1/T of it (all of it
  // when `partitioned` is off or T does not divide n); gather_slices puts the group's parts together.
  struct Slice {
    size_t offset, count;
  };
  Slice stage_slice(size_t n, bool partitioned) const;
  void gather_slices(float* data, size_t n, bool partitioned);
  std::unique_ptr<Work> send_activation(pipe::StageLinks& links, float* data, size_t n);
  void receive_activation(pipe::StageLinks& links, float* data, size_t n);
  // The micro-batch's samples into the current buffer; a ds_batch of them.
  ds_batch load_micro_batch(int64_t epoch, int64_t within, int64_t micro, ds_tensor& input, ds_tensor& target);
  // Σg² over this rank's owned gradients of the slots `pick` selects.
  double owned_sum_of_squares(const std::function<bool(const ParamSlot&)>& pick);
  // The plugin's index of the engine's layer i (the stage's layers start at stage_bounds[stage]).
  int32_t plugin_layer(size_t i) const { return first_layer_ + static_cast<int32_t>(i); }
  MicroBatch& current() { return in_flight_[buffer_]; }
  const MicroBatch& current() const { return in_flight_[buffer_]; }
  bool first_stage() const { return !config_.pipeline || config_.pipeline->first(); }
  bool last_stage() const { return !config_.pipeline || config_.pipeline->last(); }
  double gradient_norm(bool averaged);
  void update(double norm, double scale, double lr);
  // The layer's parameters in fp32 (its tensors one after another), gathered at stage 3; release
  // after use.
  const float* acquire_params(size_t layer, bool training);
  const std::byte* acquire_stored(size_t layer, bool training);  // the same in the parameters' precision
  CallParams call_params(size_t layer, bool training);           // (see CallParams); release after use
  void release_params(size_t layer, bool training);
  bool owns_tied(size_t layer) const;  // it holds a tied parameter's owner
  ds_dtype stored_type() const;        // the parameters' precision as a tensor type
  // The device layers hold the layer's parameters for this pass: no fetch or widening on the host.
  bool device_holds_params(size_t layer) const { return device_layers_ && device_layers_->holds_params(layer); }
  // Where the plugin adds the layer's gradients (fp32, its tensors one after another); store_grads
  // then adds them into the gradient buffers when those are 16-bit.
  float* layer_grads(size_t layer);
  void store_grads(size_t layer);
  // Backward's host part of a layer, once its gradients `grads` (layer_grads) are in: the tied
  // gradients taken in, store_grads, and the unit handed to the reducer when this was its first layer.
  void finish_backward(size_t layer, float* grads, bool last_micro_batch);
  // 16-bit gradients: the fp32 scratch of the layer's gradients (with a device, odd and even layers
  // alternate, so that one's download overlaps the next one's backward).
  PageVector<float>& grad_scratch(size_t layer) { return grad_scratch_[config_.device != nullptr ? layer % 2 : 0]; }
  // The layer's first element inside its unit's data (elements of `elem` bytes).
  std::byte* layer_in_unit(void* unit_base, size_t layer, size_t elem) const;
  // Tied parameters: the owner layer's forward copies their values out; its backward takes in the
  // gradients the other layers added.
  void copy_tied_values(size_t layer, const float* params);
  void take_tied_grads(size_t layer, float* grads);
  bool owns(size_t layer, const ParamSlot& tied) const;  // the tied slot's owner is in `layer`
  std::byte* owned_params(const zero::Unit& unit);  // this rank's chunk of the unit, in `precision` (in memory)
  // Rounds n fp32 values into the unit's chunk from element `lo` of the chunk on: in memory, or into
  // the parameter swap file (written back once the chunk's last element is in).
  void put_params(const zero::Unit& unit, size_t lo, const float* values, size_t n);
  // The parameters the optimizer updates ([unit.chunk] of master_storage()), and the storage of the
  // gradients it reads unless the update is fused.
  std::byte* master(const zero::Unit& unit);
  amp::Storage master_storage() const;
  amp::Storage optimizer_grad_storage() const;
  void build_segments();  // segments_, fused_update_ and grads32_, once the optimizer exists
  // The partition [P] by units: fn(unit, lo, hi) for each unit's share [lo, hi) of [begin, begin + count).
  void for_each_owned(size_t begin, size_t count,
                      const std::function<void(const zero::Unit&, size_t lo, size_t hi)>& fn) const;
  // NVMe offload (partition_state.cpp): the swap file, the sub-group step, segments_ cut to
  // [begin, begin + count) (parameters in `master` when the master copy is on NVMe).
  void open_swap(const std::function<std::unique_ptr<Optimizer>(size_t)>& make);
  void open_param_swap();  // parameter offload: which units stay in memory, the swap file
  void update_swapped(double lr);
  std::vector<Segment> segments_in(size_t begin, size_t count, std::byte* master) const;
  // This rank's fp32 master copy and (unless null) optimizer state, each [P] in fp32, from memory or
  // the swap file; and the same written back (16-bit parameters rounded from the master).
  void read_partition(std::vector<float>& master_p, std::vector<std::vector<float>>* state);
  void store_partition(const std::vector<float>& master_p, const std::vector<std::vector<float>>& state);
  // ds_tensor views of a layer's tensors inside `layer_base` (the layer's data, of `type`: fp32, or its
  // stored 16 bits; nullptr: shapes only; tied ones fp32 in `tied_base`), into `out`.
  void views(const void* layer_base, const float* tied_base, size_t layer, std::vector<ds_tensor>& out,
             ds_dtype type = DS_F32) const;

  EngineConfig config_;
  Plugin& plugin_;
  ProcessGroup& group_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  // Ranks that train on different samples (the sequence-parallel ranks of one data rank share theirs).
  int data_ranks() const { return group_.size() / plugin_.sequence_parallel().size; }
  int data_rank() const { return group_.rank() / plugin_.sequence_parallel().size; }

  std::unique_ptr<Dataset> own_data_;  // the plugin's dataset, when no other is given
  std::unique_ptr<SequenceSlice> sliced_;  // sequence parallelism: this rank's chunks of that data's samples
  Dataset& dataset_;
  ds_dataset_info data_{};
  int64_t rows_ = 0;  // samples in the forward pass under way: micro_batch, or fewer in predict()
  DistributedSampler sampler_;

  std::vector<ParamSlot> slots_;
  std::vector<Layer> layers_;
  size_t num_params_ = 0;                          // Ψ of this rank's layers (replicas included)
  std::vector<ModelTensor> model_tensors_;         // the whole model's (model_tensors())
  size_t model_params_ = 0;                        // the whole model's Ψ
  std::unique_ptr<zero::PartitionLayout> layout_;  // stage 0: one rank's view, nothing padded
  size_t elem_ = 4;                                // bytes per parameter element (of `precision`)
  PageVector<std::byte> params_;                   // in `precision`; stages 0-2: [full size]; stage 3: the partition [P]
                                                   // (empty with parameter offload: param_swapper_ holds it)
  std::vector<float> master_;                      // 16-bit precision or parameter offload: the fp32 master
                                                   // partition [P] (empty with low_precision_master)
  bool master_on_nvme_ = false;                    // NVMe offload and master_ wanted: it is in the swap file
  std::unique_ptr<offload::StateSwapper> swapper_; // NVMe offload: [master] + the optimizer state, [P] each
  std::vector<float> grads32_;                     // 16-bit gradients, not fused: the fp32 gradient partition [P]
  // The optimizer reads the 16-bit gradients scaled and writes the 16-bit parameters (build_segments).
  bool fused_update_ = false;
                                                   // (empty with low_precision_master)
  PageVector<float> param_scratch_;                // 16-bit: one layer's fp32 parameters [max layer]
  size_t param_scratch_elems_ = 0, tied_elems_ = 0;  // param_scratch_'s and tied_values_' sizes (hold_upload_sources)
  std::array<PageVector<float>, 2> grad_scratch_;  // 16-bit: one layer's fp32 gradients [max layer]; the second
                                                   // with a device only (grad_scratch())
  std::optional<amp::LossScaler> scaler_;
  std::unique_ptr<zero::GradientReducer> grads_;
  std::unique_ptr<zero::ChunkSource> chunks_;      // stage 3: where the gathers take the partition from
  offload::ParamSwapper* param_swapper_ = nullptr; // parameter offload: chunks_, as the swapper
  std::vector<std::byte> chunk_scratch_;           // parameter offload: one chunk read for a forward-only pass
  std::byte* staged_chunk_ = nullptr;              // parameter offload: the swapped chunk put_params is filling
  std::unique_ptr<zero::ParamFetcher> fetcher_;    // stage 3 (after chunks_: destroyed first)
  zero::Policy policy_;                            // what the stage shards
  std::vector<Segment> segments_;                  // what the optimizer updates (P elements)
  std::vector<TensorRange> tensor_ranges_;         // the tensors inside those P elements
  std::vector<float> grad_a_, grad_b_;             // activation gradients, ping-pong, [max activation] (host layers)
  std::vector<float> shared_workspace_;            // recompute on the host: [max layer workspace]
  PageVector<float> tied_values_, tied_grads_;     // tied parameters' fp32 values and gradients [Σ tied sizes]
  std::vector<std::byte> inference_unit_;          // stage 3 forward-only passes: one gathered unit
  std::vector<MicroBatch> in_flight_;              // one, or with a pipeline one per micro-batch in flight
  size_t buffer_ = 0;                              // the one the micro-batch under way uses
  int32_t first_layer_ = 0;                        // the plugin's index of layers_[0] (pipeline stages)
  std::vector<ds_tensor> param_views_, grad_views_;  // scratch for one layer's tensor views
  DeviceLayers::GradSync grad_sync_;               // device layers: what backward does with grad_views_
  std::vector<float> slices_;                      // pipeline x tensor parallelism: gather_slices' scratch
  std::unique_ptr<DeviceLayers> device_layers_;    // config_.device: the layer calls on it (declared after
                                                   // the host buffers it pins: it unpins them first)
  std::unique_ptr<DeviceGather> device_gather_;    // stage 3 with device_step_: the partition on the device
                                                   // (after device_layers_)
  std::unique_ptr<DeviceStep> device_step_;        // the optimizer on the device (after device_layers_ and
                                                   // device_gather_)
  bool host_stale_ = false;                        // device_step_ updated since the host's copies were synced
  MemoryReport freed_peak_;  // memory() as it was before release_host_state freed anything, the largest
  bool host_state_held_ = true;  // master_ and the optimizer's state hold elements (device_step_ frees them)
  size_t master_elems_ = 0;      // master_'s size while freed
  size_t params_bytes_ = 0;      // params_'s size while freed (stages 0-2 with device_step_; 0 while held)
  int64_t micro_ = 0;                              // the step's micro-batch under way
  std::string optimizer_place_;                    // optimizer_place()
  std::string device_note_;                        // device_note()
  size_t unpinned_bytes_ = 0;                      // of the host buffers the device's copies use
  ModelGroups model_groups_;                       // tensor and sequence parallelism: the plugin's groups
  ds_collectives collectives_{};                   // and their collectives (over model_groups_)
  int64_t steps_ = 0;    // optimizer steps taken, skipped ones included
  int64_t updates_ = 0;  // optimizer steps applied (the optimizer's and the LR schedule's count)
  int64_t steps_per_epoch_ = 0;
};

}  // namespace ds
