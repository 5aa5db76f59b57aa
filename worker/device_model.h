// One rank training a plugin's model on one backend with every buffer in that backend's memory:
// parameters [Ψ], gradients [Ψ], Adam/AdamW's m and v [Ψ], activations, workspaces and the batch.
// No ZeRO, mixed precision or process group: the plain loop forward → backward → optimizer step,
// each layer through the plugin (whose ops run on the backend), the optimizer through kernels/cuda's
// Adam on a CUDA backend and the same element body (cpu/adam_element.h) on the CPU's. A tied
// parameter shares its owner's values and gradient (gradients accumulate, so both layers add into
// one buffer). Used by dsworker --selftest (a GPT trained on the GPU and on the CPU, step by step)
// and bench/gpu (GPT-2's tokens/s).
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/adam_element.h"
#include "plugin/plugin.h"

namespace ds {

class DeviceModel {
 public:
  // `plugin` was created on the backend to use (CPU or CUDA); batches are input [micro_batch, ...]
  // and target [micro_batch, ...] of the plugin's dataset_info shapes, int32 (token models) or fp32
  // input. Parameters start as `initial` (Ψ values, the non-tied tensors in layer order).
  DeviceModel(const Plugin& plugin, int64_t micro_batch, const std::vector<float>& initial);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // Ψ: the parameters' count (tied ones once), and the number of tensors they are in.
  static int64_t count_parameters(const Plugin& plugin);
  static int64_t count_tensors(const Plugin& plugin);

  // Forward and backward over one batch (gradients zeroed first, d(loss) = 1); returns the loss.
  // `input` holds micro_batch samples' input values as raw 4-byte patterns (int32 tokens or fp32).
  float forward_backward(const std::vector<int32_t>& input, const std::vector<int32_t>& target);
  // One Adam (decoupled = false) or AdamW step of every parameter from the gradients.
  void adam_step(const cpu::AdamArgs& args, bool decoupled);
  // Waits for the device.
  void synchronize() const;

  std::vector<float> parameters() const;  // [Ψ]
  std::vector<float> gradients() const;   // [Ψ]
  // Takes `other`'s parameters and Adam moments (a model of the same plugin, on any backend).
  void load_state(const DeviceModel& other);

 private:
  struct Buffer {  // backend memory
    void* data = nullptr;
    size_t bytes = 0;
  };
  Buffer allocate(size_t bytes);
  void to_device(void* dst, const void* src, size_t bytes) const;
  void to_host(void* dst, const void* src, size_t bytes) const;
  void zero(void* dst, size_t bytes);
  float* param_at(size_t slot) const;
  float* grad_at(size_t slot) const;
  ds_tensor tensor(void* data, ds_dtype dtype, const ds_shape& shape) const;

  const Plugin& plugin_;
  bool on_cuda_;
  int64_t micro_batch_;
  int64_t n_ = 0;                                   // Ψ
  std::vector<std::vector<size_t>> offsets_;        // [layer][param] → element offset in params_/grads_
  std::vector<ds_shape> shapes_;                    // shapes_[i] = input shape of layer i; [L] = the loss
  ds_dtype input_dtype_ = DS_F32;
  Buffer params_, grads_, m_, v_, input_, target_, loss_grad_, zeros_;
  std::vector<Buffer> acts_;                        // acts_[i] = output of layer i
  std::vector<Buffer> workspaces_;
  Buffer grad_a_, grad_b_;                          // activation gradients, ping-pong
  std::vector<Buffer> owned_;                       // everything allocated, freed at the end
};

}  // namespace ds
