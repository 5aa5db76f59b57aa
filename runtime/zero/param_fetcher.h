// ZeRO stage 3's parameters: each rank holds only its partition; a layer's parameters are
// all-gathered into a pooled buffer just before the layer runs and released after it, with the
// next layers prefetched while it computes (DeepSpeed's stage3_* settings, per layer here, since a
// layer is the unit of gathering):
//   prefetch_elems     layers gathered ahead of their use (in flight or done) stay within this
//                      many elements (stage3_prefetch_bucket_size; 0 = no prefetch);
//   max_live_elems     gathered elements held at once, prefetched ones included, stay within this
//                      (stage3_max_live_parameters); the layer about to run is gathered regardless;
//   persistence        layers of at most this many elements stay gathered for the whole run
//                      (stage3_param_persistence_threshold), as long as they add up to at most
//                      model_persistence elements (stage3_model_persistence_threshold); they are
//                      all-gathered once after each optimizer step.
// A layer used twice in a row (the last layer: forward, then at once backward; the first layer
// between micro-batches) is kept, not gathered again. The order of use within a step is fixed —
// forward 0..L−1 then backward L−1..0, once per micro-batch — so every rank issues the same
// gathers in the same order. Each gather moves Ψ_layer·(W−1)/W elements per rank.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "amp/storage.h"
#include "comm/process_group.h"
#include "zero/buffer_pool.h"
#include "zero/layout.h"

namespace ds::zero {

struct FetchLimits {
  int64_t prefetch_elems = 50'000'000;
  int64_t max_live_elems = 1'000'000'000;
  int64_t persistence = 100'000;
  int64_t model_persistence = INT64_MAX;
};

class ParamFetcher {
 public:
  // `partition` (this rank's P elements of `storage`, which the optimizer step writes) must outlive
  // the fetcher; gathers the persistent layers (a collective).
  ParamFetcher(const PartitionLayout& layout, ProcessGroup& group, const void* partition, amp::Storage storage,
               FetchLimits limits, int64_t micro_batches);
  ~ParamFetcher();

  // The layer's gathered parameters ([unit padded], the layer's tensors at their offsets from the
  // unit's start); waits for its gather and starts prefetches. Layers must be acquired in the
  // order of use, each released before the next is acquired.
  const void* acquire(size_t layer);
  void release(size_t layer);
  // After the optimizer step (every use of the step done): re-gathers the persistent layers.
  void end_step();

  size_t pooled_bytes() const { return pool_.bytes(); }          // peak of the gathered copies
  size_t persistent_bytes() const { return persistent_bytes_; }  // always-gathered layers

 private:
  enum class State { Released, InFlight, Live, Persistent };
  void gather(size_t layer, bool ahead);
  void prefetch_after(size_t position);

  const PartitionLayout& layout_;
  ProcessGroup& group_;
  const std::byte* partition_;
  DataType type_;  // of the gathers
  size_t elem_;    // bytes per element
  FetchLimits limits_;
  std::vector<size_t> order_;  // layers in order of use within a step
  size_t position_ = 0;        // index into order_ of the next use
  std::vector<State> state_;   // per layer
  std::vector<bool> ahead_;    // per layer: gathered by a prefetch, not used yet
  std::vector<std::vector<std::byte>> buffer_;             // per layer: its gathered unit, when held
  std::vector<std::unique_ptr<Work>> pending_;             // per layer: its gather in flight
  size_t held_elems_ = 0, ahead_elems_ = 0;                // non-persistent layers
  size_t persistent_bytes_ = 0;
  BufferPool pool_;
};

}  // namespace ds::zero
