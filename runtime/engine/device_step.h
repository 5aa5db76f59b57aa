// The optimizer's step on the device (a GPU), where each rank holds the whole model's parameters (ZeRO
// stages 0-2 with the optimizer not offloaded, as DeepSpeed runs it without offload_optimizer). The
// gradients stay where the layers summed them (DeviceLayers' keep_grads buffers), the parameters where the
// layers read them (keep_params), and the optimizer's state for this rank's elements, and in 16-bit
// training their fp32 master copy, live on the device in the host optimizer's flat order. So a step moves
// nothing model-sized between host and device: the squared norm comes back as one number (and LAMB's
// per-tensor sums). The updates are the CPU loops' element bodies.
// With several ranks (a group over device memory: NCCL) the gradients are summed there unit by unit, through
// flat buffers in the host's unit layout (one collective per unit, as DeepSpeed's buckets, not one per
// tensor): at stage 0 all-reduced; at stages 1-2 reduce-scattered, each rank updates its partition's part of
// each tensor, and the updated parameters are all-gathered there. Each unit's sum starts as the last backward
// pass is done with it, on the group's stream, while backward goes on with the units before it. At stage 2 (partition_grads) every micro-batch's sums are
// reduce-scattered so, and added into this rank's gradient partition, the only gradients the device keeps
// for the step: the layers' buffers (DeviceLayers' shared one) take the next unit's gradients.
// At stage 3 (Plan::gathered) the parameters are this rank's partition alone (device_gather.h): the update
// writes it, and the layers gather what they read.
// Tied parameters, as on the host: the users' gradients are added into the owner's before the norm,
// and after the update the users' copies take the owner's values.
// The host's copies (parameters, master, state) go stale with the first update: store() brings them up
// to date (checkpoints, exports); after the host changes them (a restore), forget(), and load() takes
// them again before the next update.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "amp/half.h"
#include "backend/backend.h"
#include "comm/process_group.h"
#include "engine/device_gather.h"
#include "engine/device_layers.h"
#include "engine/memory_report.h"
#include "optim/optimizer.h"

namespace ds {

class DeviceStep {
 public:
  struct Tensor {
    size_t layer = 0, index = 0;  // its view among DeviceLayers' views of the layer
    size_t size = 0;              // its elements
    size_t from = 0, count = 0;   // the part this rank updates, [from, from + count) of its elements
    size_t offset = 0;            // and where that part is in the optimizer's flat order [n]
    size_t unit = 0, in_unit = 0; // partitioned: its unit and its first element's place in the unit
    size_t host = 0;              // its first element's place in the host's full parameter buffer
  };
  // With several ranks: a unit's elements (padded to ranks · chunk when partitioned), the chunk each rank
  // updates (replicas: the unit), and where that chunk is in the rank's partition, as zero::PartitionLayout
  // has them.
  struct Unit {
    size_t padded = 0, chunk = 0, part_offset = 0;
  };
  struct Tie {
    size_t layer = 0, index = 0;              // the user's view
    size_t owner_layer = 0, owner_index = 0;  // the owner's
  };
  struct Plan {
    std::vector<Tensor> tensors;
    size_t layout_units = 0;  // the layout's units, whose indices Tensor::unit and unit_done take (some may
                              // hold no tensor: layers without parameters)
    std::vector<Tie> ties;
    size_t n = 0;              // the optimizer's elements (partitioned: the rank's partition, Σ chunk)
    size_t state_buffers = 0;  // its state() count
    std::optional<amp::Half> rounding;       // 16-bit training's parameter precision (then an fp32 master
                                             // lives on the device); none in fp32
    std::optional<amp::Half> grad_rounding;  // 16-bit gradient accumulation's precision; none for fp32 sums
    ProcessGroup* group = nullptr;           // the ranks over device memory (nullptr: one rank)
    std::vector<Unit> units;                 // with several ranks: the layout's units (else empty)
    bool partitioned = false;                // stages 1-2 on several ranks (else the ranks are replicas)
    // Partitioned, stage 2: each micro-batch's sums go into the rank's partition [n], and the layers'
    // gradient buffers are reused by each unit (DeviceLayers::LayerShape::shared_grads_at).
    bool partition_grads = false;
    // Stage 3: the parameters this rank updates are its partition in `gathered` (the master in fp32; else
    // narrowed from the master after each update), which the layers' gathers read; no gather after the update.
    DeviceGather* gathered = nullptr;
  };
  DeviceStep(backend::Device& device, DeviceLayers& layers, Plan plan);
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  bool loaded() const { return loaded_; }
  // The device memory it holds: the master and state (optimizer_state), the gradients' partition (grads),
  // the collectives' buffers and the norm's sums (workspace).
  const MemoryReport& memory() const { return held_; }
  // Host to device: the master copy ([n] fp32, 16-bit training; else nullptr) and the state buffers (fp32;
  // one without data, a fresh state: zeroed there).
  void load(const float* master, std::span<const StateView> state);
  void forget() { loaded_ = false; }
  bool partitions_grads() const { return partition_grads_; }
  // Before a training step's first backward: partition_grads' sums start at zero.
  void begin_step();
  // After each micro-batch's backward but the step's last: partition_grads, unit_done for the units not yet
  // reported; else, with 16-bit gradient accumulation, the sums so far rounded to it, as the host's 16-bit
  // buffers hold them (the device sums in fp32 between the roundings).
  void end_micro_batch(double pre);
  // In the step's last backward pass (partition_grads: in every one), once it is done with a unit's layers
  // (`unit`: the layout's index):
  // the unit's gradients rounded (16-bit accumulation), the tied gradients added into the owners' in it;
  // with several ranks each tensor's gradients multiplied by `pre` and the unit's sum across the ranks started
  // (all-reduced for replicas, reduce-scattered when partitioned, so each rank sums the parts it updates; in
  // the gradients' precision). Then backward goes on while the group's stream sums (partition_grads: into the
  // partition, once the sum is done).
  void unit_done(size_t unit, double pre);
  // After the step's backward passes: unit_done for the units not yet reported; with several ranks, the
  // sums waited for and multiplied by `post` (GradientReducer's averaging), rounded again with 16-bit
  // accumulation.
  void finish_gradients(double pre, double post);
  // Σg² over the parts this rank updates, in double.
  double sum_squares();
  // One update: the gradients scaled by grad_scale (unscale and clipping), the optimizer's update, the
  // parameters rounded from the master (16-bit), the ties' copies refreshed. After sum_squares().
  void update(const DeviceUpdate& update, double grad_scale);
  // Device to host: the master (16-bit; else nullptr), the state, and each tensor's parameters (fp32),
  // which params(tensor, values) takes (not at stage 3: DeviceGather::store has the partition's).
  void store(float* master, std::span<const StateView> state,
             const std::function<void(const Tensor& tensor, const float* values)>& params);

 private:
  // The sums of every tensor of the unit (replicas), or of the parts this rank updates (partitioned), of the
  // gradients; or every rank's updated parts into every rank's views (partitioned, of the parameters).
  enum class Exchange { all_reduce_grads, reduce_scatter_grads, gather_params };
  struct Copy {  // between a tensor's elements and their place in a slot's flat buffer
    float* buffer = nullptr;
    float* tensor = nullptr;
    size_t count = 0;
  };
  struct Exchanging {  // a unit's sum under way
    size_t unit = 0, slot = 0;
    std::unique_ptr<Work> work;
  };
  float* param(const Tensor& t) const;
  float* grad(const Tensor& t) const;       // the tensor's gradients in the layer's buffer
  float* grad_part(const Tensor& t) const;  // the sums of the part this rank updates
  using RoundTensor = backend::Device::RoundTensor;
  using Values = backend::Device::Values;
  using Move = backend::Device::Move;
  std::vector<Values> grad_parts() const;  // each tensor's grad_part, where this rank updates some
  std::vector<RoundTensor> in_place(const std::vector<const Tensor*>& tensors) const;  // their whole gradients
  float* values(Exchange e, const Tensor& t) const { return e == Exchange::gather_params ? param(t) : grad(t); }
  Exchange grads_exchange() const { return partitioned_ ? Exchange::reduce_scatter_grads : Exchange::all_reduce_grads; }
  Copy whole(Exchange e, const Tensor& t, size_t slot) const;  // the tensor, at its place in the unit
  Copy part(Exchange e, const Tensor& t, size_t slot) const;   // this rank's part, at its place in the chunk
  std::optional<amp::Half> moved_as(Exchange exchange) const;
  // Zeros the elements of buffer [length] (of `element` bytes) outside the `written` [begin, end) ranges.
  void zero_gaps(float* buffer, size_t length, size_t element, std::vector<std::pair<size_t, size_t>> written);  // the 16-bit type it moves; none: fp32
  // Where the element at `place` (a Copy's place in `buffer`) is when `buffer` holds 16-bit values.
  static uint16_t* half_at(float* buffer, const float* place);
  void* allocate(size_t bytes, size_t MemoryReport::*kind);
  std::unique_ptr<Work> start_exchange(Exchange exchange, size_t unit, size_t slot);
  void finish_exchange(Exchange exchange, size_t unit, size_t slot, Work& work);
  void finish_oldest_exchange();
  // The end of a backward pass: unit_done for the units it did not report; the next pass reports anew.
  void start_unreported_sums(double pre);

  backend::Device& device_;
  DeviceLayers& layers_;
  std::vector<Tensor> tensors_;
  std::vector<Tie> ties_;
  size_t n_;
  std::optional<amp::Half> rounding_, grad_rounding_;
  ProcessGroup* group_;
  std::vector<Unit> units_;
  bool partitioned_;
  bool partition_grads_;
  DeviceGather* gathered_;
  size_t slots_ = 0;               // several ranks: 2, or 1 where one unit has parameters
  float* unit_buffer_[2] = {};     // several ranks, per slot: [max padded], one unit whole (replicas with
                                   // 16-bit gradients: 16-bit values, half the bytes)
  float* chunk_buffer_[2] = {};    // partitioned, per slot: [max chunk], this rank's part of it
  float* partition_ = nullptr;     // partition_grads: [n], this rank's sums of the step's gradients
  std::vector<std::vector<const Tensor*>> unit_tensors_;  // per layout unit: its tensors (into tensors_)
  std::vector<bool> begun_;        // this step, per layout unit: unit_done has run
  std::vector<size_t> tie_units_;  // per tie: its owner's unit
  std::deque<Exchanging> exchanging_;  // several ranks: at most one per slot
  float* master_ = nullptr;        // 16-bit training: fp32 [n]
  std::vector<float*> state_;      // per state buffer: fp32 [n]
  double* sums_ = nullptr;         // [max(1, 2 · tensors)]: Σg², or LAMB's (Σp², Σu²) per tensor
  std::vector<void*> owned_;
  MemoryReport held_;
  bool loaded_ = false;
};

}  // namespace ds
