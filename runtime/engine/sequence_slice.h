// Sequence parallelism's data side (DeepSpeed-Ulysses): every sample is cut along its first dimension,
// the sequence, into S equal chunks, and sequence-parallel rank s trains on chunk s, positions
// [s·L/S, (s+1)·L/S). The ranks of one data-parallel coordinate load the same samples; each keeps its chunk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace ds {

// Rank `rank` of `ranks`'s view of `whole`: the same samples, each input and target its chunk of the
// sequence. Throws ConfigError (naming sequence_parallel_size) unless both have a first dimension that
// `ranks` divides.
class SequenceSlice : public Dataset {
 public:
  SequenceSlice(Dataset& whole, int rank, int ranks);
  ds_dataset_info info() const override { return part_; }
  const ds_dataset_info& whole() const { return whole_info_; }
  void get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) override;
  // n whole inputs [n, *whole().input_shape] → this rank's chunks [n, *info().input_shape].
  void cut_input(const void* whole, void* part, int64_t n) const;

 private:
  Dataset& whole_;
  int rank_, ranks_;
  ds_dataset_info whole_info_, part_;
  std::vector<std::byte> input_, target_;  // whole samples, before they are cut
};

// x [n, L, inner] (elements of `elem` bytes) → chunk `rank` of `ranks` along L: part [n, L/ranks, inner].
void take_sequence_chunk(const void* whole, void* part, int64_t n, int64_t L, int64_t inner, size_t elem, int rank,
                         int ranks);
// The inverse for all ranks at once: chunks [ranks, n, L/ranks, inner] (rank-major, as an all-gather
// leaves them) → whole [n, L, inner].
void join_sequence_chunks(const void* chunks, void* whole, int64_t n, int64_t L, int64_t inner, size_t elem, int ranks);

}  // namespace ds
