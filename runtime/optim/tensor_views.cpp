// Tensor views inside segments (see tensor_views.h).
#include "optim/tensor_views.h"

#include <stdexcept>

#include <fmt/format.h>

namespace ds::optim {

std::vector<TensorView> locate_tensors(const char* optimizer, std::span<const Segment> segments,
                                       const std::vector<TensorRange>& tensors, size_t n) {
  const std::vector<TensorRange> whole{{0, n}};
  std::vector<TensorView> views;
  for (const TensorRange& t : tensors.empty() ? whole : tensors) {
    if (t.size == 0) continue;
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
    const size_t within = t.offset - start;
    views.push_back({home->params + within, home->grads + within, t.offset, t.size});
  }
  return views;
}

}  // namespace ds::optim
