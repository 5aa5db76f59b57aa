// The optimizer's step on the device (a GPU), for a rank that holds the whole model and trains alone
// (ZeRO stages 0-2 on one GPU with the optimizer not offloaded, as DeepSpeed runs it without
// offload_optimizer). The gradients stay where the layers summed them (DeviceLayers' keep_grads
// buffers), the parameters where the layers read them (keep_params), and the optimizer's state, and
// in 16-bit training the fp32 master copy, live on the device in the host optimizer's flat order. So a
// step moves nothing model-sized between host and device: the squared norm comes back as one number
// (and LAMB's per-tensor sums). The updates are the CPU loops' element bodies.
// Tied parameters, as on the host: the users' gradients are added into the owner's before the norm,
// and after the update the users' copies take the owner's values.
// The host's copies (parameters, master, state) go stale with the first update: store() brings them up
// to date (checkpoints, exports); after the host changes them (a restore), forget(), and load() takes
// them again before the next update.
#pragma once
#include <cstddef>
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
    size_t offset = 0, size = 0;  // its elements in the optimizer's flat order [n]
    float* host_params = nullptr; // fp32 training: its values in the host's parameter buffer
  };
  struct Tie {
    size_t layer = 0, index = 0;              // the user's view
    size_t owner_layer = 0, owner_index = 0;  // the owner's
  };
  // `n`: the optimizer's elements; `state_buffers`: its state() count; `rounding`: 16-bit training's
  // parameter precision (then an fp32 master lives on the device), none in fp32.
  DeviceStep(backend::Device& device, DeviceLayers& layers, std::vector<Tensor> tensors, std::vector<Tie> ties,
             size_t n, size_t state_buffers, std::optional<amp::Half> rounding);
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  bool loaded() const { return loaded_; }
  // Host to device: the master copy ([n] fp32, 16-bit training; else nullptr) and the state buffers (fp32).
  void load(const float* master, std::span<const StateView> state);
  void forget() { loaded_ = false; }
  // After the step's backward passes: the tied gradients added into their owners'; with a group (the
  // data-parallel ranks over device memory), each tensor's gradients multiplied by `pre`, summed across
  // the ranks and multiplied by `post` (GradientReducer's averaging).
  void finish_gradients(ProcessGroup* group, double pre, double post);
  // Σg² over the tensors, in double.
  double sum_squares();
  // One update: the gradients scaled by grad_scale (unscale and clipping), the optimizer's update, the
  // parameters rounded from the master (16-bit), the ties' copies refreshed. After sum_squares().
  void update(const DeviceUpdate& update, double grad_scale);
  // Device to host: the master (16-bit) or each tensor's parameters (fp32, into host_params), and the state.
  void store(float* master, std::span<const StateView> state);

 private:
  float* param(const Tensor& t);
  float* grad(const Tensor& t) const;
  void* allocate(size_t bytes);

  backend::Device& device_;
  DeviceLayers& layers_;
  std::vector<Tensor> tensors_;
  std::vector<Tie> ties_;
  size_t n_;
  std::optional<amp::Half> rounding_;
  float* master_ = nullptr;        // 16-bit training: fp32 [n]
  std::vector<float*> state_;      // per state buffer: fp32 [n]
  double* sums_ = nullptr;         // [max(1, 2 · tensors)]: Σg², or LAMB's (Σp², Σu²) per tensor
  std::vector<void*> owned_;
  bool loaded_ = false;
};

}  // namespace ds
