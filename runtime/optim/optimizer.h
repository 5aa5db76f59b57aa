// Optimizers on flat fp32 buffers, with DeepSpeed's exact update rules (reference
// deepspeed-runtime.md §4): Adam/AdamW as FusedAdam and DeepSpeedCPUAdam, SGD as torch.optim.SGD,
// Lamb as FusedLamb. Math is fp32 per element, as in DeepSpeed's kernels.
//
// An optimizer is made for n elements — the whole model at ZeRO stage 0, one rank's partition
// later — and keeps state for exactly those. The n elements may lie in several places (a rank's
// chunks of the flat buffers at ZeRO stages 1 and 2): a step takes them as segments, in order. Adam and SGD are element-wise and need nothing else.
// Lamb's trust ratio needs per-tensor norms: `tensors` names the tensors, and when a partition
// boundary cuts a tensor the caller supplies a NormReducer that sums the partial norms across ranks.
//
// The element loops live here, not in kernels/cpu (reworked concurrently by another engineer):
// plain loops compiled with -O3 -fno-math-errno so the compiler vectorizes them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/ds_config.h"

namespace ds {

struct TensorRange {
  size_t offset, size;  // one parameter tensor among the n elements (offsets count across segments)
};

// A contiguous piece of the elements a step updates: params[0..size) and their grads. State element
// k belongs to the k-th element of the segments taken in order.
struct Segment {
  float* params;
  const float* grads;
  size_t size;
};

// Lamb on a partition: `sums` holds, per entry of `tensors`, [Σp², Σu²] over this rank's slice
// (u = Lamb's update direction); the reducer must sum it over all ranks sharing those tensors,
// in place. For this to work every rank passes the same tensor list in the same order, each range
// clipped to its partition (size 0 when the tensor lies elsewhere).
using NormReducer = std::function<void(std::vector<double>& sums)>;

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

  // Named state buffers (e.g. "exp_avg", "exp_avg_sq"), each n floats, for checkpoints and memory
  // accounting. SGD without momentum has none.
  virtual std::vector<std::pair<std::string, std::vector<float>*>> state() = 0;

  // Replaces (beta1, beta2) from the next step on (OneCycle momentum cycling). Adam and Lamb only;
  // SGD throws std::logic_error.
  virtual void set_betas(double beta1, double beta2);
};

// The optimizer `config` describes, for n elements; `reduce_norms` only matters to Lamb.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, size_t n, NormReducer reduce_norms = {});

}  // namespace ds
