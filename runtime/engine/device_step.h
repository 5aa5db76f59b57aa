// The optimizer's step on the device (a GPU), where each rank holds the whole model's parameters (ZeRO
// stages 0-2 with the optimizer not offloaded, as DeepSpeed runs it without offload_optimizer). The
// gradients stay where the layers summed them (DeviceLayers' keep_grads buffers), the parameters where the
// layers read them (keep_params), and the optimizer's state for this rank's elements, and in 16-bit
// training their fp32 master copy, live on the device in the host optimizer's flat order. So a step moves
// nothing model-sized between host and device: the squared norm comes back as one number (and LAMB's
// per-tensor sums). The updates are the CPU loops' element bodies.
// With several ranks (a group over device memory: NCCL) the gradients are all-reduced there; at stages
// 1-2 they are reduce-scattered, each rank updates its partition's part of each tensor, and the updated
// parameters are all-gathered there, both unit by unit through a flat buffer in the host's unit layout.
// Tied parameters, as on the host: the users' gradients are added into the owner's before the norm,
// and after the update the users' copies take the owner's values.
// The host's copies (parameters, master, state) go stale with the first update: store() brings them up
// to date (checkpoints, exports); after the host changes them (a restore), forget(), and load() takes
// them again before the next update.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "amp/half.h"
#include "backend/backend.h"
#include "comm/process_group.h"
#include "engine/device_layers.h"
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
  // Partitioned (stages 1-2 on several ranks): a unit's elements (padded to ranks · chunk) and the chunk
  // each rank updates, as zero::PartitionLayout has them.
  struct Unit {
    size_t padded = 0, chunk = 0;
  };
  struct Tie {
    size_t layer = 0, index = 0;              // the user's view
    size_t owner_layer = 0, owner_index = 0;  // the owner's
  };
  // `n`: the optimizer's elements; `state_buffers`: its state() count; `rounding`: 16-bit training's
  // parameter precision (then an fp32 master lives on the device), none in fp32; `grad_rounding`: 16-bit
  // gradient accumulation's precision (grad_accum_dtype), none for fp32 sums. `group`: the ranks over
  // device memory (nullptr: one rank); `units`: partitioned, the layout's units (else empty).
  DeviceStep(backend::Device& device, DeviceLayers& layers, std::vector<Tensor> tensors, std::vector<Tie> ties,
             size_t n, size_t state_buffers, std::optional<amp::Half> rounding, std::optional<amp::Half> grad_rounding,
             ProcessGroup* group, std::vector<Unit> units);
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  bool loaded() const { return loaded_; }
  // Host to device: the master copy ([n] fp32, 16-bit training; else nullptr) and the state buffers (fp32).
  void load(const float* master, std::span<const StateView> state);
  void forget() { loaded_ = false; }
  // After each micro-batch's backward: with 16-bit gradient accumulation, the sums so far rounded to it,
  // as the host's 16-bit buffers hold them (the device sums in fp32 between the roundings).
  void round_gradients();
  // After the step's backward passes: the tied gradients added into their owners'; with several ranks,
  // each tensor's gradients multiplied by `pre`, summed across the ranks (in fp32: all-reduced for
  // replicas, reduce-scattered unit by unit when partitioned, so each rank sums the parts it updates)
  // and multiplied by `post` (GradientReducer's averaging); rounded again with 16-bit accumulation.
  void finish_gradients(double pre, double post);
  // Σg² over the parts this rank updates, in double.
  double sum_squares();
  // One update: the gradients scaled by grad_scale (unscale and clipping), the optimizer's update, the
  // parameters rounded from the master (16-bit), the ties' copies refreshed. After sum_squares().
  void update(const DeviceUpdate& update, double grad_scale);
  // Device to host: the master (16-bit; else nullptr), the state, and each tensor's parameters (fp32),
  // which params(tensor, values) takes.
  void store(float* master, std::span<const StateView> state,
             const std::function<void(const Tensor& tensor, const float* values)>& params);

 private:
  // Partitioned: the sums of the parts this rank updates (of grad), or every rank's updated parts into
  // every rank's views (of param).
  enum class Exchange { reduce_scatter_grads, gather_params };
  float* param(const Tensor& t) const;
  float* grad(const Tensor& t) const;
  void* allocate(size_t bytes);
  void exchange_units(Exchange exchange, float* (DeviceStep::*values)(const Tensor&) const);

  backend::Device& device_;
  DeviceLayers& layers_;
  std::vector<Tensor> tensors_;
  std::vector<Tie> ties_;
  size_t n_;
  std::optional<amp::Half> rounding_, grad_rounding_;
  ProcessGroup* group_;
  std::vector<Unit> units_;
  float* unit_buffer_ = nullptr;   // partitioned: [max padded], one unit gathered
  float* chunk_buffer_ = nullptr;  // and [max chunk], this rank's part of it
  float* master_ = nullptr;        // 16-bit training: fp32 [n]
  std::vector<float*> state_;      // per state buffer: fp32 [n]
  double* sums_ = nullptr;         // [max(1, 2 · tensors)]: Σg², or LAMB's (Σp², Σu²) per tensor
  std::vector<void*> owned_;
  bool loaded_ = false;
};

}  // namespace ds
