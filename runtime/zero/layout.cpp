// Units and partitions of the flat buffers (see layout.h).
#include "zero/layout.h"

#include <algorithm>
#include <stdexcept>

namespace ds::zero {

size_t Unit::padded() const { return chunk * static_cast<size_t>(world); }

PartitionLayout::PartitionLayout(std::span<const size_t> layer_sizes, size_t unit_elems, bool per_layer, int world,
                                 int rank)
    : world_(world), rank_(rank) {
  if (world < 1 || rank < 0 || rank >= world) throw std::invalid_argument("PartitionLayout: bad rank or world size");
  const size_t w = static_cast<size_t>(world);
  auto close = [&](Unit& u) {
    u.chunk = (u.size + w - 1) / w;
    u.world = world;
    u.part_offset = partition_size_;
    partition_size_ += u.chunk;
    full_size_ += u.padded();
    units_.push_back(u);
  };
  Unit open;
  bool has_open = false;
  for (size_t i = 0; i < layer_sizes.size(); ++i) {
    const size_t n = layer_sizes[i];
    if (has_open && (per_layer || open.size + n > unit_elems)) {
      close(open);
      has_open = false;
    }
    if (!has_open) {
      open = Unit{};
      open.first_layer = i;
      open.begin = full_size_;
      has_open = true;
    }
    layer_begin_.push_back(open.begin + open.size);
    unit_index_.push_back(units_.size());
    open.size += n;
    open.end_layer = i + 1;
  }
  if (has_open) close(open);
}

Range PartitionLayout::owned_part(size_t offset, size_t size) const {
  auto after = std::upper_bound(units_.begin(), units_.end(), offset,
                                [](size_t x, const Unit& u) { return x < u.begin; });
  if (after == units_.begin() || size == 0) return {0, 0};
  const Unit& u = *std::prev(after);
  const size_t own = owned_begin(u);
  const size_t lo = std::max(offset, own), hi = std::min(offset + size, own + u.chunk);
  return hi > lo ? Range{u.part_offset + (lo - own), hi - lo} : Range{};
}

size_t PartitionLayout::owned_within(size_t offset) const {
  auto after = std::upper_bound(units_.begin(), units_.end(), offset,
                                [](size_t x, const Unit& u) { return x < u.begin; });
  if (after == units_.begin()) return 0;
  const size_t own = owned_begin(*std::prev(after));
  return own > offset ? own - offset : 0;
}

}  // namespace ds::zero
