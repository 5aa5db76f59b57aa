// Distributed sampling (see sampler.h).
#include "engine/sampler.h"

#include <numeric>
#include <stdexcept>

#include "engine/rng.h"

namespace ds {

DistributedSampler::DistributedSampler(int64_t num_samples, int rank, int world_size, uint64_t seed, bool shuffle)
    : num_samples_(num_samples),
      per_rank_((num_samples + world_size - 1) / world_size),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle) {
  if (num_samples <= 0) throw std::invalid_argument("sampler: the dataset is empty");
}

void DistributedSampler::build_epoch(int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(num_samples_));
  std::iota(perm.begin(), perm.end(), 0);
  if (shuffle_) {
    SplitMix64 rng(mix_seed(seed_, static_cast<uint64_t>(epoch)));
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
  }
  order_.resize(static_cast<size_t>(per_rank_));
  for (int64_t k = 0; k < per_rank_; ++k)  // wrap around to pad, as torch does
    order_[static_cast<size_t>(k)] = perm[static_cast<size_t>((rank_ + k * world_size_) % num_samples_)];
  cached_epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch, int64_t start, int64_t count) {
  if (epoch != cached_epoch_) build_epoch(epoch);
  if (start < 0 || start + count > per_rank_) throw std::out_of_range("sampler: range beyond this rank's share");
  return {order_.begin() + start, order_.begin() + start + count};
}

}  // namespace ds
