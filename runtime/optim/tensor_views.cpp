// Tensor places and views inside segments (see tensor_views.h).
#include "optim/tensor_views.h"

#include <stdexcept>

#include <fmt/format.h>

namespace ds::optim {

std::vector<TensorPlace> place_tensors(const char* optimizer, std::span<const Segment> segments,
                                       const std::vector<TensorRange>& tensors, size_t n) {
  const std::vector<TensorRange> whole{{0, n}};
  std::vector<TensorPlace> places;
  for (const TensorRange& t : tensors.empty() ? whole : tensors) {
    if (t.size == 0) {
      places.push_back({nullptr, 0, t.offset, 0});
      continue;
    }
    size_t start = 0;  // of the segment, among the n elements
    const Segment* home = nullptr;
    for (const Segment& s : segments) {
      if (t.offset >= start && t.offset - start <= s.size && t.size <= s.size - (t.offset - start)) {
        home = &s;
        break;
      }
      start += s.size;
    }
    if (!home)
      throw std::invalid_argument(
          fmt::format("{}: tensor [{}, +{}) is not inside one segment", optimizer, t.offset, t.size));
    places.push_back({home, t.offset - start, t.offset, t.size});
  }
  return places;
}

std::vector<TensorView> locate_tensors(const char* optimizer, std::span<const Segment> segments,
                                       const std::vector<TensorRange>& tensors, size_t n) {
  std::vector<TensorView> views;
  for (const TensorPlace& t : place_tensors(optimizer, segments, tensors, n)) {
    if (t.size == 0) continue;
    if (t.segment->param_type != amp::Storage::F32 || t.segment->grad_type != amp::Storage::F32)
      throw std::invalid_argument(fmt::format("{}: parameters and gradients must be fp32", optimizer));
    views.push_back({static_cast<float*>(t.segment->params) + t.within,
                     static_cast<const float*>(t.segment->grads) + t.within, t.offset, t.size});
  }
  return views;
}

}  // namespace ds::optim
