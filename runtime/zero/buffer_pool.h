// Reusable byte buffers for the transient full-size copies ZeRO stages 2 and 3 make (gathered
// parameters, gradient buckets): a released buffer goes back to the pool, not to the system, so
// after the first step a step allocates nothing. The pool's footprint only grows: bytes() is the
// peak of what was held at once (plus fragmentation, which the best-fit reuse keeps small).
#pragma once
#include <cstddef>
#include <vector>

namespace ds::zero {

class BufferPool {
 public:
  // A buffer of n bytes (aligned for any element type), contents unspecified: the smallest free one
  // that fits, else a new one.
  std::vector<std::byte> acquire(size_t n);
  void release(std::vector<std::byte> buffer);
  size_t bytes() const { return bytes_; }  // capacity of every buffer the pool made

 private:
  std::vector<std::vector<std::byte>> free_;
  size_t bytes_ = 0;
};

}  // namespace ds::zero
