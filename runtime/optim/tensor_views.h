// Where each parameter tensor's elements lie among an optimizer step's segments: the per-tensor
// optimizers (the 1-bit family compresses and scales tensor by tensor) work on these views.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "optim/optimizer.h"

namespace ds::optim {

struct TensorView {
  float* params;       // [size]
  const float* grads;  // [size]
  size_t offset;       // of the tensor's first element among the n (= index into state buffers)
  size_t size;
};

// One view per non-empty entry of `tensors` (an empty list: [0, n) is one tensor). Throws
// std::invalid_argument naming `optimizer` for a range outside [0, n) or across a segment boundary.
std::vector<TensorView> locate_tensors(const char* optimizer, std::span<const Segment> segments,
                                       const std::vector<TensorRange>& tensors, size_t n);

}  // namespace ds::optim
