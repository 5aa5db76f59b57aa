// Where each parameter tensor's elements lie among an optimizer step's segments: Lamb's trust ratio
// and the 1-bit family's compression work tensor by tensor.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "optim/optimizer.h"

namespace ds::optim {

// One entry of `tensors`: its elements are `segment`'s [within, within + size); null for size 0 (a
// tensor outside this rank's partition).
struct TensorPlace {
  const Segment* segment;
  size_t within;
  size_t offset;  // of the tensor's first element among the n (= index into state buffers)
  size_t size;
};

// One place per entry of `tensors`, empty ones included (an empty list: [0, n) is one tensor).
// Throws std::invalid_argument naming `optimizer` for a range outside [0, n) or across a segment
// boundary.
std::vector<TensorPlace> place_tensors(const char* optimizer, std::span<const Segment> segments,
                                       const std::vector<TensorRange>& tensors, size_t n);

struct TensorView {
  float* params;       // [size]
  const float* grads;  // [size]
  size_t offset;       // as TensorPlace's
  size_t size;
};

// fp32 views of the non-empty places; throws std::invalid_argument for bf16 segments.
std::vector<TensorView> locate_tensors(const char* optimizer, std::span<const Segment> segments,
                                       const std::vector<TensorRange>& tensors, size_t n);

}  // namespace ds::optim
