// Which samples each rank trains on (torch's DistributedSampler, as DeepSpeed's data loader uses):
// each epoch is a permutation of [0, num_samples) seeded by (seed, epoch), padded by wrapping to a
// multiple of the world size; rank r takes positions r, r+W, r+2W, … So for every optimizer step,
// the union of all ranks' micro-batches is one contiguous slice of the permutation, which is what
// makes N ranks with global batch B train exactly like one rank with batch B.
#pragma once
#include <cstdint>
#include <vector>

namespace ds {

class DistributedSampler {
 public:
  DistributedSampler(int64_t num_samples, int rank, int world_size, uint64_t seed, bool shuffle = true);
  // Samples per rank per epoch: ceil(num_samples / world_size).
  int64_t per_rank() const { return per_rank_; }
  // `count` sample indices of this rank, starting at position `start` of its share of `epoch`.
  std::vector<int64_t> indices(int64_t epoch, int64_t start, int64_t count);

 private:
  void build_epoch(int64_t epoch);
  int64_t num_samples_, per_rank_;
  int rank_, world_size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;  // this rank's share of the cached epoch
};

}  // namespace ds
