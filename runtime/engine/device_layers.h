// The engine's layer calls on a device backend (a GPU), with the engine's own buffers staying in host
// memory, as ZeRO-Offload keeps the fp32 parameters, gradients and optimizer on the CPU:
//   forward:  the layer's parameters (and the tied values it uses) are on the device or copied
//             there, the plugin runs there, its output stays on the device for the next layer; the
//             last layer's loss (and the predictions, when asked for) come back to the host;
//   backward: the layer's gradient buffers go to the device, or are zeroed there when they hold
//             zeros on the host (16-bit training's fp32 scratch; fp32 gradients before the step's
//             first additions at stages 0-1, every micro-batch's bucket at stages 2-3); the plugin
//             adds into them there; they come back asynchronously, on the device's copy stream, while
//             the layers below run (wait_grads before reading them). Activation gradients stay on
//             the device.
//             With `keep_grads` (stages 0-1 with fp32 gradients, whose host buffer sums the whole
//             step's micro-batches) each layer's gradients instead stay on the device for the whole
//             step: zeroed there at the step's first micro-batch, summed there, and copied back once,
//             at its last micro-batch, over the host buffers (which hold zeros until then).
//             A layer with `shared_grads_at` (stage 2 with the optimizer on the device, which sums every
//             micro-batch into its partition: device_step.h) has its place in one buffer that the layers
//             share instead, the layers of each unit side by side: its gradients are zeroed at each of its
//             backward calls (GradSync::first) and hold until a layer at an overlapping place runs its
//             backward (the next unit down). So the device holds the largest unit's gradients, not the
//             model's.
// So everything the engine does between layer calls (ZeRO's gathers and reductions, clipping, the
// optimizer, checkpoints) is unchanged. The micro-batch's input and target are copied over at layer
// 0's forward.
//
// Parameters (ParamSource): `kept` (ZeRO stages 0-2, where every rank holds the whole model): each
// layer's stay on the device from their upload until forget_params(), which the engine calls when a
// pass begins (a step, an evaluation, a prediction). So they cross once per step, as ZeRO-Offload
// copies the updated parameters to the GPU once per step, not at every forward and backward of every
// micro-batch. The engine prefetches them all at the pass's first forward (prefetch_params): the
// uploads run on the copy stream, in the precision they are stored in (16-bit ones are widened to
// fp32 on the device), while the layers before run, and each layer's ops wait for its own. `staged`
// (stage 3 with the optimizer on the host, whose point is not to hold the whole model): two staging buffers of the
// largest layer's size take the layers' calls in turn: each call's upload, in the precision the
// engine gives them (16 bits in 16-bit training, except in a tied parameter's owner layer, widened
// there), waits only for the ops of the call two before (the buffer's last readers), on the device's
// upload stream, so it runs while the previous call's ops do; the call returns once its upload is
// done (the engine then releases the gathered values). `provided` (stage 3 with the optimizer on the
// device): the parameters never come from the host; DeviceGather gathers a layer's on the device and
// hands its views over (provide_params) before the layer's calls.
//
// The buffers are fp32. In 16-bit training the parameters are widened to fp32 (on the device, or by
// the engine for a tied parameter's owner layer) and the gradients come back in fp32, as for the
// CPU's layers; each layer's output and input gradient are rounded to the 16-bit precision on the
// device, as the CPU path rounds them, so the values crossing layers are the 16-bit ones (the engine
// also sets the device's 16-bit products, Device::set_half_matmuls). The device's memory holds every
// layer's output and workspace (one shared workspace with activation checkpointing), the parameters
// (every layer's, or the two staging buffers, with their 16-bit uploads beside them in 16-bit training), the gradients
// (every layer's, the shared buffer, or two staging buffers of the largest layer's size), and the batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/memory_report.h"
#include "plugin/plugin.h"

namespace ds {

class DeviceLayers {
 public:
  struct LayerShape {
    ds_shape input, output;     // at micro_batch rows
    size_t workspace_bytes = 0;
    size_t param_floats = 0;    // its tensors' elements (tied ones included), each rounded up to 4
    std::optional<size_t> shared_grads_at;  // keep_grads: its gradients' place (floats) in the shared buffer
  };
  enum class ParamSource { kept, staged, provided };  // where the layers' parameters come from (above)
  // `plugin` was created on `device`'s table. `rounding`: the 16-bit precision that layer outputs
  // and input gradients are rounded to (none in fp32 training).
  DeviceLayers(backend::Device& device, const Plugin& plugin, const std::vector<LayerShape>& layers, bool shared_workspace,
               ParamSource params, bool keep_grads, const ds_dataset_info& data, int64_t micro_batch,
               size_t prediction_floats, std::optional<amp::Half> rounding);
  ~DeviceLayers();
  DeviceLayers(const DeviceLayers&) = delete;
  DeviceLayers& operator=(const DeviceLayers&) = delete;

  // Layer `i`'s forward with host parameter views `params` (nullptr when holds_params(i)); `batch` is the host micro-batch, with
  // `output` the layer's output shape at the rows under way. The last layer writes the loss into
  // host_loss[0] and the predictions into batch.predictions (host) when that is set. `recompute`:
  // activation checkpointing's second forward during backward (layer 0's batch is already there).
  void forward(size_t i, const std::vector<ds_tensor>* params, const ds_shape& output, const ds_batch& batch,
               float* host_loss, bool recompute = false);
  // What backward does with a layer's host gradient buffers.
  struct GradSync {
    std::vector<bool> zeroed;  // which hold zeros: zeroed on the device rather than copied there
    bool first = true;         // keep_grads: the sums start at zero (the step's first micro-batch, or each one)
    bool last = true;          // keep_grads: its last (the sums come back)
  };
  // Layer `i`'s backward: `loss_grad` is d(total)/d(loss) for the last layer (unused for the others,
  // whose grad_output is the activation gradient the layer after left on the device). `grads` are
  // host views the plugin's additions land in (see GradSync), once wait_grads(i) has returned; until
  // then they hold NaNs, on the emulated device, and the caller must not write them.
  void backward(size_t i, const std::vector<ds_tensor>* params, const std::vector<ds_tensor>& grads,
                const GradSync& sync, float loss_grad, const ds_batch& batch);
  // Waits until layer i's gradients from its last backward are in the host buffers.
  void wait_grads(size_t i);
  // Layer i's parameters are on the device (kept, uploaded since forget_params(); or provided): the engine
  // need not fetch or widen them on the host.
  bool holds_params(size_t i) const { return !params_kept_.empty() && params_kept_[i]; }
  // The parameters may have changed: kept, each layer's next call uploads them again; provided, each
  // layer's calls wait for provide_params.
  void forget_params();
  // `provided`: layer i's calls read `views` (fp32 device tensors, one per parameter, in the layer's order) until
  // withdraw_params(i) or forget_params(); the views' memory must hold their values until then.
  void provide_params(size_t i, std::vector<ds_tensor> views);
  void withdraw_params(size_t i);
  // kept: starts the upload of layer i's parameters, `host` (its tensors in fp32, or in bf16 or
  // fp16, which the device widens to fp32 before the layer's first op; pinned, to overlap), on the copy
  // stream; the layer's ops wait for it, and the host must not change `host` before the last layer's
  // forward has returned. holds_params(i) from then on.
  void prefetch_params(size_t i, const std::vector<ds_tensor>& host);
  bool keeps_params() const { return source_ == ParamSource::kept; }
  // kept, in 16-bit training: each layer's 16-bit upload buffer is kept for the next upload (true, the
  // default: the engine uploads the parameters every step), or freed once widened (false: the device step
  // updates them there, and they are uploaded again only after a restore, into a buffer made then).
  void keep_uploads(bool keep) { keep_uploads_ = keep; }
  // For an optimizer step on the device (device_step.h): layer i's parameter views there (kept,
  // holds_params(i); the ops that follow wait for their upload) and its gradient views (keep_grads, after
  // its first backward; in the shared buffer, their values hold until the next unit's backward). The
  // references stay valid until the layer's parameters are uploaded again.
  const std::vector<ds_tensor>& device_params(size_t i);
  const std::vector<ds_tensor>& device_grads(size_t i) const;
  // Page-locks host memory [p, p + bytes) that the copies use, until this object goes or unpin(p) (one
  // of which must come before that memory is freed). False, with the reason in `why`, when the device's
  // system refuses.
  bool pin(void* p, size_t bytes, std::string& why);
  void unpin(void* p);  // (nothing if p is not pinned)
  // The device memory these buffers take, by kind (params, grads, activations with the batch, workspace).
  const MemoryReport& memory() const { return held_; }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
  };
  Buffer allocate(size_t bytes, size_t MemoryReport::*kind);
  void release(Buffer& buffer, size_t MemoryReport::*kind);  // one that allocate() made; then empty
  // Device views of host tensors `host` laid out one after another in `buffer`, each 16-byte aligned.
  std::vector<ds_tensor> views_in(const std::vector<ds_tensor>& host, const Buffer& buffer) const;
  // The same views, with the host fp32 values copied there (those that `zeroed` marks are zeroed instead).
  std::vector<ds_tensor> stage(const std::vector<ds_tensor>& host, const Buffer& staging,
                               const std::vector<bool>* zeroed = nullptr);
  // staged: `host` (fp32 or 16-bit) into the next staging buffer, on the upload stream
  // after the ops that last read it; the layer's ops wait for it (and widen the 16-bit ones).
  std::vector<ds_tensor> upload_staged(const std::vector<ds_tensor>& host);
  // After a layer call's ops: marks them as the staging buffer's readers and waits for its upload.
  void finish_staged_call();
  // Where the 16-bit upload of the fp32 tensor at `view` in `fp32` goes: the same place in `halves`, a
  // buffer of half fp32's size (allocated at the first use).
  uint16_t* half_beside(Buffer& halves, const Buffer& fp32, const void* view);
  // Layer i's parameters on the device: the kept ones, or `host` uploaded.
  std::vector<ds_tensor> layer_params(size_t i, const std::vector<ds_tensor>* host);
  ds_batch device_batch(const ds_batch& batch);
  ds_tensor input_of(size_t i, const ds_batch& device) const;
  void* workspace(size_t i) const;

  backend::Device& device_;
  const Plugin& plugin_;
  std::vector<LayerShape> layers_;
  bool shared_workspace_;
  ParamSource source_;
  bool keep_grads_;
  ds_dataset_info data_;
  int64_t micro_batch_;
  std::optional<amp::Half> rounding_;
  std::vector<Buffer> outputs_, workspaces_;
  std::vector<Buffer> params_;     // kept: one per layer; staged: two staging buffers, in turn; provided: none
  std::vector<bool> params_kept_;  // kept or provided: layer i's parameters are on the device
  std::vector<std::vector<ds_tensor>> kept_views_;  // and their device views
  struct Widening {  // a prefetched 16-bit tensor, widened at the layer's first use
    amp::Half type;
    const uint16_t* half;
    float* out;
    size_t n;
  };
  std::vector<Buffer> halves_;                   // kept: per layer, its 16-bit uploads (when any)
  bool keep_uploads_ = true;
  Buffer staged_halves_[2];                      // else: the staging buffers' 16-bit uploads (when any)
  uint64_t staging_reads_[2] = {0, 0};           // per staging buffer: a mark of the ops that last read it
  size_t next_param_staging_ = 0;                // the staging buffer the next call uses
  uint64_t staged_upload_ = 0;                   // the call under way: its upload's ticket (0: none)
  size_t staged_buffer_ = 0;                     // and its staging buffer
  std::vector<std::vector<Widening>> widenings_;  // per layer, still to do
  std::vector<uint64_t> upload_tickets_;         // per layer: its prefetch
  uint64_t last_upload_ = 0;
  std::vector<Buffer> grads_;      // keep_grads: one per layer (its own, or its place in the shared
                                   // buffer); else two staging buffers, in turn
  std::vector<std::vector<ds_tensor>> kept_grad_views_;  // keep_grads: per layer, its views in grads_
  size_t next_staging_ = 0;        // the staging buffer the next backward uses
  std::vector<uint64_t> grad_tickets_;   // per grads_ buffer: the download that last read it
  std::vector<uint64_t> layer_tickets_;  // per layer: its last gradients' download
  uint64_t last_ticket_ = 0;             // the latest download
  Buffer grad_a_, grad_b_, input_, target_, predictions_, loss_grad_;
  ds_tensor input_t_{}, target_t_{}, predictions_t_{};
  Buffer* grad_next_ = nullptr;  // backward: where the next layer down reads its grad_output
  std::vector<Buffer> owned_;
  MemoryReport held_;
  std::vector<void*> pinned_;  // host memory pin() page-locked
};

}  // namespace ds
