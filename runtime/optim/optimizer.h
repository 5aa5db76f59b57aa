// Optimizers on flat buffers, with DeepSpeed's exact update rules (reference
// deepspeed-runtime.md §4): Adam/AdamW as FusedAdam and DeepSpeedCPUAdam, SGD as torch.optim.SGD,
// Lamb as FusedLamb. Math is fp32 per element, as in DeepSpeed's kernels. Parameters, gradients
// and state are fp32; Adam, SGD and Lamb also take bf16 parameters and gradients (DeepSpeed's
// bf16_master_weights_and_grads) and keep bf16 state (bf16_optimizer_states), still computing in
// fp32 and rounding once, to nearest even, when they store.
//
// An optimizer is made for n elements — the whole model at ZeRO stage 0, one rank's partition
// later — and keeps state for exactly those. The n elements may lie in several places (a rank's
// chunks of the flat buffers at ZeRO stages 1 and 2): a step takes them as segments, in order. Adam and SGD are element-wise and need nothing else.
// Lamb's trust ratio needs per-tensor norms: `tensors` names the tensors, and when a partition
// boundary cuts a tensor the caller supplies a NormReducer that sums the partial norms across ranks.
//
// The communication-compressed optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb) work at ZeRO stage 0
// only and talk to the other ranks themselves: they turn the engine's gradient all-reduce off after
// their warm-up (wants_averaged_gradients) and all-reduce 1-bit compressed momentum instead.
//
// The element loops of Adam, SGD and LAMB are CPU kernels (kernels/cpu/adam.h, sgd_lamb.h). Adam's is
// fused with mixed precision's passes: it takes segments whose gradients are 16-bit and still to be
// scaled, and writes the model's 16-bit parameters beside the fp32 master (fuses_mixed_precision).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "amp/storage.h"
#include "comm/process_group.h"
#include "config/ds_config.h"
#include "cpu/adagrad_element.h"
#include "cpu/rmsprop_element.h"
#include "cpu/adam_element.h"
#include "cpu/lamb_element.h"
#include "cpu/lion_element.h"
#include "cpu/sgd_element.h"

namespace ds {

struct TensorRange {
  size_t offset, size;  // one parameter tensor among the n elements (offsets count across segments)
  // For Muon, which orthogonalizes a matrix whole: the tensor as a rows × cols matrix (0 × 0: not one Muon
  // takes), its first element in the gathered buffer (PartitionExchange's; without one, among the n) and where this
  // part begins within it (row-major).
  size_t rows = 0, cols = 0, whole = 0, within = 0;
};

// Which tensors Muon orthogonalizes, DeepSpeed's rule (set_optimizer_flags): at least 2 dimensions and a name
// with neither "embed" nor "lm_head" in any case; a tensor of more dimensions as dims[0] rows (DeepSpeed views 4-D
// ones so, and orthogonalizes 3-D ones as batches of matrices). {rows, cols}, or {0, 0} for the others.
std::pair<size_t, size_t> muon_matrix(std::string_view name, std::span<const int64_t> dims);

// Muon on a partition: how the ranks share whole tensors. gather fills `full` with every rank's partition (n
// elements each, the caller's ZeRO layout) at the places TensorRange::whole counts; scatter sums such a buffer
// over the ranks and leaves this rank its partition of the sums. Every rank calls both at each step.
struct PartitionExchange {
  int rank = 0, world = 1;
  std::function<void(const float* partition, std::vector<float>& full)> gather;
  std::function<void(const std::vector<float>& full, float* partition)> scatter;
};

// A contiguous piece of the elements a step updates: params[0..size) and their grads. State element
// k belongs to the k-th element of the segments taken in order.
struct Segment {
  void* params;        // [size] of param_type
  const void* grads;   // [size] of grad_type
  size_t size;
  amp::Storage param_type = amp::Storage::F32;  // F32 or BF16 (only Adam, SGD and Lamb take BF16)
  amp::Storage grad_type = amp::Storage::F32;   // F32 or BF16; F16 too where the optimizer fuses
  // Only for optimizers that fuse mixed precision's passes (fuses_mixed_precision; others throw
  // std::invalid_argument): the gradients are multiplied by grad_scale as they are read (the unscale and
  // clip factor), and the updated parameters are also rounded into param_copy ([size] of copy_type, F16
  // or BF16) when it is set.
  double grad_scale = 1.0;
  void* param_copy = nullptr;
  amp::Storage copy_type = amp::Storage::BF16;
};

// One named state buffer (e.g. Adam's "exp_avg"): `size` elements of `storage` at `data`, in the
// order of the elements a step updates.
struct StateView {
  std::string name;
  amp::Storage storage;
  void* data;
  size_t size;
  // The elements as fp32; throws std::logic_error for bf16 state.
  std::span<float> f32() const;
};

// Lamb on a partition: `sums` holds, per entry of `tensors`, [Σp², Σu²] over this rank's slice
// (u = Lamb's update direction); the reducer must sum it over all ranks sharing those tensors,
// in place. For this to work every rank passes the same tensor list in the same order, each range
// clipped to its partition (size 0 when the tensor lies elsewhere).
using NormReducer = std::function<void(std::vector<double>& sums)>;

// One update's arithmetic, for a device that runs the same element bodies as the CPU loops
// (engine/device_step.h): the arguments of update number `step` at `lr`, as step() would use them.
struct DeviceUpdate {
  enum class Kind { adam, adamw, sgd, lamb, lion, adagrad, rmsprop } kind = Kind::adam;
  cpu::AdamArgs adam{};  // adam, adamw
  cpu::SgdArgs sgd{};    // sgd (no state without momentum)
  cpu::LionArgs lion{};  // lion
  cpu::AdagradArgs adagrad{};  // adagrad
  cpu::RmspropArgs rmsprop{};  // rmsprop (one state: no momentum, not centered)
  cpu::LambArgs lamb{};  // lamb: the moments, then per tensor lamb_step_size · trust_ratio(Σp², Σu²)
  float lamb_step_size = 0.0f;
  std::function<float(double p_sq, double u_sq)> trust_ratio;
  NormReducer reduce_sums;  // lamb on a partition: sums the per-tensor (Σp², Σu²) across ranks (may be empty)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of the segments' params from their grads (already averaged, unscaled, clipped) at
  // learning rate lr, in place; the segments hold n elements in all. `step` is the 1-based count of
  // updates applied so far including this one (Adam's and Lamb's bias correction; SGD's first step
  // initialises its momentum buffer). `tensors` gives tensor boundaries inside [0, n), each within
  // one segment: Lamb computes one trust ratio per tensor and leaves elements outside every range
  // (padding) unchanged; an empty list means [0, n) is one tensor. Adam and SGD ignore it.
  virtual void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
                    int64_t step) = 0;
  // The same for one contiguous segment of n elements.
  void step(float* params, const float* grads, size_t n, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) {
    const Segment whole{params, grads, n};
    this->step(std::span<const Segment>(&whole, 1), tensors, lr, step);
  }

  // Named state buffers (e.g. "exp_avg", "exp_avg_sq"), each n elements, for checkpoints and memory
  // accounting. SGD without momentum has none.
  virtual std::vector<StateView> state() = 0;

  // Element-wise optimizers (Adam/AdamW, SGD) can also update any run of elements with state the
  // caller holds: `state` has one buffer per state() entry, of its storage, holding the segments'
  // elements in order. ZeRO-Infinity steps sub-group by sub-group this way, with state read from
  // NVMe, on an optimizer made for 0 elements. Others throw std::logic_error.
  virtual bool elementwise() const { return false; }
  // Whether step() and step_with_state() honour a segment's grad_scale and param_copy and read fp16
  // gradients (Adam/AdamW).
  virtual bool fuses_mixed_precision() const { return false; }
  virtual void step_with_state(std::span<const Segment> segments, std::span<const StateView> state, double lr,
                               int64_t step);

  // The update a device can run in its place, with state() as its state buffers in fp32 (Adam/AdamW,
  // SGD, Lamb, Lion, Adagrad with fp32 state); none for the others.
  virtual std::optional<DeviceUpdate> device_update(double /*lr*/, int64_t /*step*/) const { return std::nullopt; }
  // With a device_update, the device may hold the state: hold_state(false) frees state()'s elements (their
  // views' data are nullptr until hold_state(true) makes them again, zeroed, for the caller to fill).
  virtual void hold_state(bool held);

  // Replaces (beta1, beta2) from the next step on (OneCycle momentum cycling). All but SGD, which
  // throws std::logic_error.
  virtual void set_betas(double beta1, double beta2);

  // Whether step() reads whole tensors (Muon's matrices): on a partition the caller then passes the exchange
  // that brings every rank's part (set_exchange), before the first step.
  virtual bool reads_whole_tensors() const { return false; }
  virtual void set_exchange(PartitionExchange /*exchange*/) {}

  // Whether update number `step` (as step()'s) wants gradients averaged across the ranks by the
  // engine (DeepSpeed's enable_backward_allreduce). Else each rank passes its own gradients.
  virtual bool wants_averaged_gradients(int64_t /*step*/) const { return true; }
  // Per-tensor numbers kept beside state() (one per entry of step()'s `tensors`, or none yet), for
  // checkpoints; the same on every rank. A checkpoint load assigns them whole.
  virtual std::vector<std::pair<std::string, std::vector<double>*>> scalar_state() { return {}; }
  // Called after a checkpoint load replaced state() and scalar_state(): drops what checkpoints do
  // not hold (the compression errors, which differ per rank; DeepSpeed zeroes them on load too).
  virtual void restored() {}
  // Bytes held outside state() (compression errors, accumulators), for memory accounting.
  virtual size_t extra_bytes() const { return 0; }
};

// The optimizer `config` describes, for n elements; `reduce_norms` only matters to Lamb, `group`
// (the data-parallel ranks) only to the 1-bit optimizers, which need it (std::invalid_argument
// without). `state` is the storage of its state buffers: BF16 for Adam, SGD and Lamb only
// (std::invalid_argument for the 1-bit optimizers, whose state is fp32).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, size_t n, NormReducer reduce_norms = {},
                                          ProcessGroup* group = nullptr, amp::Storage state = amp::Storage::F32);

}  // namespace ds
