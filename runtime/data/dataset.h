// Where training samples come from: the model plugin's own dataset (the `mlp` plugin's synthetic
// one) or a token corpus from the config's `data` block (runtime/data/token_dataset.h). The engine
// only asks for the samples' shapes and for batches of samples by index; which indices each rank
// takes is the DistributedSampler's business (runtime/engine/sampler.h).
#pragma once
#include <cstdint>

#include "plugin/ds_plugin.h"

namespace ds {

class Dataset {
 public:
  virtual ~Dataset() = default;
  // num_samples, and one sample's input and target shapes and dtypes (without the batch dimension).
  virtual ds_dataset_info info() const = 0;
  // Fills input [n, *input_shape] and target [n, *target_shape] (caller-allocated) with samples
  // indices[0..n); throws std::out_of_range for an index outside [0, num_samples).
  virtual void get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) = 0;
};

}  // namespace ds
