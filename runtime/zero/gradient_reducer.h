// ZeRO's gradient path. As backward finishes a unit's gradients (the flat buffers are in layer
// order and backward runs last to first, so units finish from the last to the first) they are
// reduced across the ranks on the communication thread while backward goes on:
//   stage 0   the full gradient buffer is kept; on the step's last micro-batch each unit is
//             all-reduced in place;
//   stage 1   the full gradient buffer is kept (micro-batches accumulate into it); on the last
//             micro-batch each unit is reduce-scattered in place: this rank's chunk receives the sum;
//   stage 2/3 no full buffer: a unit's gradients go to a pooled bucket, zeroed for each micro-batch,
//             which is reduce-scattered (every micro-batch) and added into this rank's gradient
//             partition [P]; with overlap_comm one bucket is reduced while backward fills the
//             next (double buffering, as DeepSpeed's overlap_comm), else each is reduced before backward
//             goes on.
// Gradients are stored, reduced and accumulated in `storage` (fp32, or fp16/bf16 under mixed
// precision: 16-bit sums rounded once per step of the ring and per accumulation).
// Averaging follows DeepSpeed: gradients are multiplied by 1/W before the sum with
// prescale_gradients, else by 1/predivide_factor before and predivide_factor/W after.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "amp/storage.h"
#include "comm/process_group.h"
#include "core/page_vector.h"
#include "zero/buffer_pool.h"
#include "zero/layout.h"
#include "zero/policy.h"

namespace ds::zero {

struct Averaging {
  bool prescale = false;        // prescale_gradients
  double predivide_factor = 1;  // gradient_predivide_factor
};

class GradientReducer {
 public:
  GradientReducer(const PartitionLayout& layout, ProcessGroup& group, Policy policy, Averaging averaging, bool overlap,
                  amp::Storage storage = amp::Storage::F32);
  ~GradientReducer();

  // Zeroes the gradients for a new step. reduce = false (stage 0 only, where nothing is sharded):
  // no all-reduce, each rank
  // keeps its own gradients (DeepSpeed's enable_backward_allreduce off, for the 1-bit optimizers).
  void begin_step(bool reduce = true);
  // Where the unit's gradients accumulate during this micro-batch ([unit padded], the layer's
  // tensors at their offsets from the unit's start); the plugin adds into it.
  void* unit_grads(size_t unit);
  // unit_grads(unit) held zeros when this micro-batch's backward began: nothing has been added into it
  // since begin_step (stages 0-1: no unit_done of this unit yet) or since it was handed out (stages
  // 2-3: a bucket is zeroed for each micro-batch). Only the layers whose backward has run since have
  // added to it.
  bool fresh(size_t unit) const { return policy_.gradients || !accumulated_[unit]; }
  // Backward is done with the unit for this micro-batch; `last` = the step's last micro-batch.
  void unit_done(size_t unit, bool last);
  // The averaging's factors, applied before and after the sum across ranks (both 1 on one rank).
  double pre_scale() const { return pre_; }
  double post_scale() const { return post_; }
  // Waits for every reduction and finishes the averaging. Afterwards owned_grads(u) holds this
  // rank's averaged gradients of each unit's chunk (at stage 0 the whole unit).
  void finish();
  void* owned_grads(const Unit& unit);
  double owned_sum_of_squares();    // Σg² over every unit's owned gradients, in order
  void scale_owned(double factor);  // clipping

  size_t bytes() const;  // gradient memory held: full buffer or partition, plus the pooled buckets
  // The gradients are summed and reduced elsewhere (the optimizer's step on a device): frees the host's
  // buffer. Afterwards only the averaging's factors and fresh() may be asked for.
  void release_storage() { free_storage(grads_); }
  // Stages 0-1: the full gradient buffer that unit_grads points into; stages 2-3: empty.
  std::span<std::byte> full_buffer() { return policy_.gradients ? std::span<std::byte>() : std::span<std::byte>(grads_); }
  // Stages 2-3: makes the pool hold every bucket a step will use (as many as are filled and reduced at
  // once, of the largest unit's size) and returns their storage, for a device to pin; stages 0-1: none.
  std::vector<std::span<std::byte>> reserve_buckets();

 private:
  struct InFlight {
    size_t unit;
    BufferPool::Buffer bucket;  // stages 2-3
    std::unique_ptr<Work> work;
  };
  template <class Buffer>
  std::byte* at(Buffer& buffer, size_t element) const { return buffer.data() + element * elem_; }
  void complete_oldest();

  const PartitionLayout& layout_;
  ProcessGroup& group_;
  Policy policy_;
  bool reduce_ = true;  // this step's gradients are reduced across the ranks
  std::vector<bool> accumulated_;  // stages 0-1, per unit: unit_done since begin_step
  amp::Storage storage_;
  DataType type_;  // of the collectives
  size_t elem_;    // bytes per element
  double pre_ = 1.0, post_ = 1.0;  // factors before and after the sum
  size_t max_in_flight_;           // stages 2-3: pooled buckets being reduced at once
  PageVector<std::byte> grads_;    // stages 0-1: [full size]; stages 2-3: the partition [P] (whole
                                   // pages: a device may pin it, engine/device_layers.h)
  BufferPool::Buffer bucket_;      // stages 2-3: the unit backward is filling, [unit padded]
  size_t bucket_unit_ = SIZE_MAX;
  std::deque<InFlight> in_flight_;
  BufferPool pool_;
};

}  // namespace ds::zero
