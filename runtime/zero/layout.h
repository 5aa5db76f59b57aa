// How ZeRO splits the flat parameter and gradient buffers among the W data-parallel ranks.
//
// The model's layers, in order, are grouped into units: consecutive layers of at most `unit_elems`
// elements together (a bigger layer is a unit of its own), or one layer per unit (stage 3, where a
// unit is what is gathered before a layer runs). Each unit is padded to W equal chunks of
// c = ceil(size / W) elements and rank r owns chunk r of every unit, so every collective works on
// one unit: a reduce-scatter of a unit's gradients leaves each rank its chunk, an all-gather of the
// chunks rebuilds the unit. A rank's partition is its chunks one after another, P = Σ c elements:
//
//   full buffer:   | unit 0: chunk for rank 0 | rank 1 | … | unit 1: rank 0 | rank 1 | … | …
//   partition r:   | unit 0's chunk r | unit 1's chunk r | …
//
// With W = 1 (and at stage 0, which does not partition) nothing is padded and the partition is
// the whole buffer. Padding elements are zero and stay zero.
#pragma once
#include <cstddef>
#include <span>
#include <vector>


namespace ds::zero {

struct Range {
  size_t offset = 0, size = 0;  // elements
};

struct Unit {
  size_t first_layer = 0, end_layer = 0;  // its layers: [first_layer, end_layer)
  size_t begin = 0;                       // offset in the full buffer (elements)
  size_t size = 0;                        // parameter elements, unpadded
  size_t chunk = 0;                       // elements per rank: ceil(size / W)
  size_t part_offset = 0;                 // offset of this rank's chunk in its partition
  size_t padded() const;                  // chunk · W: the unit's extent in the full buffer
  int world = 1;
};

class PartitionLayout {
 public:
  // layer_sizes[i]: parameter elements of layer i. per_layer: one unit per layer, else units of at
  // most unit_elems elements.
  PartitionLayout(std::span<const size_t> layer_sizes, size_t unit_elems, bool per_layer, int world, int rank);

  const std::vector<Unit>& units() const { return units_; }
  const Unit& unit_of_layer(size_t layer) const { return units_[unit_index_[layer]]; }
  size_t unit_index(size_t layer) const { return unit_index_[layer]; }
  size_t layer_begin(size_t layer) const { return layer_begin_[layer]; }  // full-buffer offset
  size_t full_size() const { return full_size_; }                          // Σ padded
  size_t partition_size() const { return partition_size_; }                // P = Σ chunk
  int world() const { return world_; }
  int rank() const { return rank_; }
  // Full-buffer offset of this rank's chunk of `unit`.
  size_t owned_begin(const Unit& unit) const { return unit.begin + static_cast<size_t>(rank_) * unit.chunk; }
  // The part of the full-buffer range [offset, offset + size) (inside one unit) that this rank owns,
  // as a range of its partition; {0, 0} when it owns none of it.
  Range owned_part(size_t offset, size_t size) const;
  // Where owned_part(offset, size)'s elements begin within that range: the index of their first in it.
  size_t owned_within(size_t offset) const;

 private:
  std::vector<Unit> units_;
  std::vector<size_t> unit_index_, layer_begin_;  // per layer
  size_t full_size_ = 0, partition_size_ = 0;
  int world_ = 1, rank_ = 0;
};

}  // namespace ds::zero
