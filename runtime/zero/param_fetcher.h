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
//
// The chunks come from a ChunkSource: the partition in memory, or a swap file (parameter offload to
// NVMe), read in the order of the gathers as far ahead as the source's buffers allow, so a chunk is
// usually in memory before its gather starts; each buffer is released when its gather is done.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "amp/storage.h"
#include "comm/process_group.h"
#include "zero/buffer_pool.h"
#include "zero/chunk_source.h"
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
  // `chunks` (this rank's chunks of `storage` elements, which the optimizer step writes) must outlive
  // the fetcher and hold the persistent layers' chunks in memory; gathers those (a collective).
  // `on_new_buffer`, when set, is called with every host buffer the fetcher makes for gathered units
  // (persistent ones included), before it is used: a device page-locks them for its uploads.
  ParamFetcher(const PartitionLayout& layout, ProcessGroup& group, ChunkSource& chunks, amp::Storage storage,
               FetchLimits limits, int64_t micro_batches,
               std::function<void(std::span<std::byte>)> on_new_buffer = {});
  ~ParamFetcher();

  // Which layers stay gathered for the whole run under these limits.
  static std::vector<bool> persistent_layers(const PartitionLayout& layout, const FetchLimits& limits);

  // The layer's gathered parameters ([unit padded], the layer's tensors at their offsets from the
  // unit's start); waits for its gather and starts prefetches. Layers must be acquired in the
  // order of use, each released before the next is acquired.
  const void* acquire(size_t layer);
  void release(size_t layer);
  // After the optimizer step (every use of the step done): re-gathers the persistent layers and
  // starts reading the next step's first chunks.
  void end_step();
  // Waits out and drops the chunks read ahead, before their values are overwritten other than by
  // a step (a checkpoint restored); end_step() reads them again.
  void discard_reads();

  size_t pooled_bytes() const { return pool_.bytes(); }          // peak of the gathered copies
  size_t persistent_bytes() const { return persistent_bytes_; }  // always-gathered layers

 private:
  enum class State { Released, InFlight, Live, Persistent };
  void gather(size_t layer, size_t use);  // for the use at order_[use]: ahead unless it is the current one
  void prefetch_after(size_t position);
  void read_ahead();
  void finish_gather(size_t layer);  // waits for it, then releases its chunk

  const PartitionLayout& layout_;
  ProcessGroup& group_;
  ChunkSource& chunks_;
  DataType type_;  // of the gathers
  size_t elem_;    // bytes per element
  FetchLimits limits_;
  std::vector<size_t> order_;  // layers in order of use within a step
  size_t position_ = 0;        // index into order_ of the next use
  std::vector<State> state_;   // per layer
  std::vector<bool> ahead_;    // per layer: gathered by a prefetch, not used yet
  std::vector<size_t> serves_; // per layer, while gathered: the use (index into order_) its gather was for
  std::vector<BufferPool::Buffer> buffer_;             // per layer: its gathered unit, when held
  std::vector<std::unique_ptr<Work>> pending_;             // per layer: its gather in flight
  std::vector<bool> holds_chunk_;                          // per layer: its gather holds a chunk read in
  std::vector<size_t> reads_;  // layers whose gathers read their chunk in, in the order of a step's gathers
  size_t reads_started_ = 0, reads_used_ = 0;              // prefixes of reads_
  size_t held_elems_ = 0, ahead_elems_ = 0;                // non-persistent layers
  size_t persistent_bytes_ = 0;
  BufferPool pool_;
};

}  // namespace ds::zero
