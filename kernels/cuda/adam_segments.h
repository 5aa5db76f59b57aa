// Multi-tensor Adam's table (adam.cuh's adam_multi_kernel, launch.h's adam_steps): the tensors to
// update and the blocks that cover them, so that one launch updates every tensor of a step, as
// DeepSpeed's and torch's fused multi-tensor Adam do, instead of a launch per tensor (GPT-2 has 148,
// most of them a few hundred elements: their launches, not their bytes, took the time). Plain C++: the
// host builds the table, the device reads it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds::cuda {

struct AdamSegment {  // one tensor: p, m, v [n] updated in place from g [n]
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
};

struct AdamBlock {  // block b of the launch: elements [begin, begin + kAdamBlockElements) ∩ [0, n) of a segment
  int64_t segment;
  int64_t begin;
};

// Elements per block: 16 per thread of 256, four at a time where aligned. A multiple of 4, so each
// block's part starts as aligned as its tensor.
constexpr int64_t kAdamBlockElements = 4096;

// The blocks covering segments[0, count), in order (none for an empty one).
inline std::vector<AdamBlock> adam_blocks(const AdamSegment* segments, size_t count) {
  std::vector<AdamBlock> blocks;
  for (size_t s = 0; s < count; ++s)
    for (int64_t begin = 0; begin < segments[s].n; begin += kAdamBlockElements)
      blocks.push_back({static_cast<int64_t>(s), begin});
  return blocks;
}

// The device table's bytes: the segments, then the blocks.
inline size_t adam_table_bytes(const AdamSegment* segments, size_t count) {
  return count * sizeof(AdamSegment) + adam_blocks(segments, count).size() * sizeof(AdamBlock);
}

}  // namespace ds::cuda
