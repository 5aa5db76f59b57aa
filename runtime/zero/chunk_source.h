// Where stage 3's gathers find this rank's chunk of each layer's parameters: in memory (the
// partition), or read in ahead of use from a swap file (ZeRO-Infinity's parameter offload,
// offload::ParamSwapper). The fetcher reads in the order of its gathers, as far ahead as can_read()
// allows, and releases each chunk once its gather is done.
#pragma once
#include <cstddef>

#include "zero/layout.h"

namespace ds::zero {

class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // The unit's chunk when it is in memory; null when it must be read in.
  virtual const std::byte* in_memory(size_t unit) const = 0;
  virtual bool can_read() const = 0;               // a buffer is free for another read
  virtual void read(size_t unit) = 0;              // starts reading the unit's chunk
  virtual const std::byte* wait(size_t unit) = 0;  // the chunk, once read
  virtual void release(size_t unit) = 0;           // its buffer may be reused
};

// The whole partition in memory: this rank's chunks one after another ([P] elements of `elem` bytes).
class MemoryChunks final : public ChunkSource {
 public:
  MemoryChunks(const PartitionLayout& layout, const void* partition, size_t elem)
      : layout_(layout), partition_(static_cast<const std::byte*>(partition)), elem_(elem) {}
  const std::byte* in_memory(size_t unit) const override {
    return partition_ + layout_.units()[unit].part_offset * elem_;
  }
  bool can_read() const override { return false; }
  void read(size_t) override {}
  const std::byte* wait(size_t unit) override { return in_memory(unit); }
  void release(size_t) override {}

 private:
  const PartitionLayout& layout_;
  const std::byte* partition_;
  size_t elem_;
};

}  // namespace ds::zero
