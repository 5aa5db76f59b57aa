// Multi-tensor launches (launch.h's adam_steps, lamb_moments, round_copies, sum_squares_multi, ...): the tensors of one
// op and the blocks that cover them, so that one launch takes every tensor of a step, as DeepSpeed's and
// torch's fused multi-tensor optimizers do, instead of a launch per tensor (GPT-2 has 148, most of them
// a few hundred elements: their launches, not their bytes, took the time). Plain C++: the host builds the
// table, the device reads it (the CUDA backend keeps each table on the device for the next call with the same
// tensors: runtime/backend/segment_tables.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ds::cuda {

struct AdamSegment {  // p, m, v [n] updated in place from g [n]
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
};

// n values from src into dst: fp32 copied (MoveKind::copy), fp32 narrowed to 16-bit bits (narrow), or 16-bit
// bits widened to fp32 (widen).
enum class MoveKind { copy, narrow, widen };
struct MoveSegment {
  void* dst;
  const void* src;
  int64_t n;
};

struct SgdSegment {  // p [n] (and buf [n] with momentum; else null) updated in place from g [n]
  float* p;
  const float* g;
  float* buf;
  int64_t n;
};

struct OneStateSegment {  // p and s [n] (Lion's momentum, Adagrad's sum) updated in place from g [n]
  float* p;
  const float* g;
  float* s;
  int64_t n;
};

struct LambSegment {  // m, v [n] updated from g [n], then p [n] moved; first_block: the index of its first
  float* p;           // block among the launch's (segment_blocks': the blocks of the segments before it)
  const float* g;
  float* m;
  float* v;
  int64_t n;
  int64_t first_block;
};

struct RoundSegment {  // dst[i] = float(half(src[i])) for i < n; dst may be src
  float* dst;
  const float* src;
  int64_t n;
};

struct SquaresSegment {  // x [n], whose squares are summed
  const float* x;
  int64_t n;
};

struct ScaleSegment {  // x [n], scaled in place
  float* x;
  int64_t n;
};

struct SegmentBlock {  // block b of a launch: elements [begin, begin + kSegmentBlockElements) ∩ [0, n) of a segment
  int64_t segment;
  int64_t begin;
};

// Elements per block: 16 per thread of 256, four at a time where aligned. A multiple of 4, so each
// block's part starts as aligned as its tensor.
constexpr int64_t kSegmentBlockElements = 4096;

// The blocks covering segments[0, count), in order (none for an empty one).
template <class Segment>
std::vector<SegmentBlock> segment_blocks(const Segment* segments, size_t count) {
  std::vector<SegmentBlock> blocks;
  for (size_t s = 0; s < count; ++s)
    for (int64_t begin = 0; begin < segments[s].n; begin += kSegmentBlockElements)
      blocks.push_back({static_cast<int64_t>(s), begin});
  return blocks;
}

// How many blocks segment_blocks gives, without making them.
template <class Segment>
size_t segment_block_count(const Segment* segments, size_t count) {
  size_t blocks = 0;
  for (size_t s = 0; s < count; ++s)
    blocks += static_cast<size_t>((segments[s].n + kSegmentBlockElements - 1) / kSegmentBlockElements);
  return blocks;
}

// Each LAMB segment's first_block: how many blocks segment_blocks gives the segments before it.
inline void set_first_blocks(LambSegment* segments, size_t count) {
  int64_t blocks = 0;
  for (size_t s = 0; s < count; ++s) {
    segments[s].first_block = blocks;
    blocks += (segments[s].n + kSegmentBlockElements - 1) / kSegmentBlockElements;
  }
}

// The table's bytes, as the kernels read them in device memory: the segments, then the blocks covering them.
template <class Segment>
std::vector<std::byte> segment_table(const Segment* segments, size_t count) {
  const std::vector<SegmentBlock> blocks = segment_blocks(segments, count);
  std::vector<std::byte> table(count * sizeof(Segment) + blocks.size() * sizeof(SegmentBlock));
  if (count > 0) std::memcpy(table.data(), segments, count * sizeof(Segment));
  if (!blocks.empty()) std::memcpy(table.data() + count * sizeof(Segment), blocks.data(), blocks.size() * sizeof(SegmentBlock));
  return table;
}

template <class Segment>
struct DeviceTable {
  const Segment* segments;
  const SegmentBlock* blocks;
  unsigned count;
};
// Where the parts of segment_table(segments, count), held at `table` in device memory, are, and the blocks'
// count (0: nothing to launch).
template <class Segment>
DeviceTable<Segment> locate_table(const Segment* segments, size_t count, const void* table) {
  const auto* device_segments = static_cast<const Segment*>(table);
  return {device_segments, reinterpret_cast<const SegmentBlock*>(device_segments + count),
          static_cast<unsigned>(segment_block_count(segments, count))};
}

}  // namespace ds::cuda
