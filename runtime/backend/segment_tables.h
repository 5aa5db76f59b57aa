// The CUDA backend's multi-tensor tables (kernels/cuda/segments.h) kept in device memory and found again
// by their segments. A training step hands the multi-tensor launches the same tensors at every call, so
// after the first step each launch finds its table there and nothing is uploaded: an upload from pageable
// host memory makes the host wait until the device has run everything queued before it (CUDA synchronizes
// the stream first), which in backward (the 16-bit gradients' roundings) would stop the host issuing ahead.
// A table's bytes are a function of its segments alone, so a table found is right even where the tensors'
// memory was freed and handed out again at the same addresses. At most `capacity` tables are kept; the one
// used longest ago goes back to the allocator, whose blocks are reused in the ops' stream order, the order
// of the launches that read the table.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "cuda/segments.h"

namespace ds::backend {

class SegmentTables {
 public:
  struct Memory {
    std::function<void*(size_t bytes)> allocate;  // device memory, which stays the allocator's
    std::function<void(void*)> release;
    std::function<void(void* dst, const void* src, size_t bytes)> upload;  // after the launches issued before
  };
  SegmentTables(Memory memory, size_t capacity);

  // segment_table(segments, count) in device memory.
  template <class Segment>
  const void* find(const Segment* segments, size_t count) {
    std::string key(reinterpret_cast<const char*>(segments), count * sizeof(Segment));
    key += typeid(Segment).name();  // (another kind's segments with the same bytes)
    return find(std::move(key), [&] { return cuda::segment_table(segments, count); });
  }
  size_t uploads() const { return uploads_; }  // the tables uploaded so far
  size_t size() const { return tables_.size(); }

 private:
  struct Table {
    void* device = nullptr;
    uint64_t used = 0;  // the use count at its last use
  };
  const void* find(std::string key, const std::function<std::vector<std::byte>()>& make);

  Memory memory_;
  size_t capacity_;
  std::unordered_map<std::string, Table> tables_;
  uint64_t uses_ = 0;
  size_t uploads_ = 0;
};

}  // namespace ds::backend
