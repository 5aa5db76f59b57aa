// Reusable byte buffers for the transient full-size copies ZeRO stages 2 and 3 make (gathered
// parameters, gradient buckets): a released buffer goes back to the pool, not to the system, so
// after the first step a step allocates nothing. The pool's footprint only grows: bytes() is the
// peak of what was held at once (plus fragmentation, which the best-fit reuse keeps small). Buffers
// own whole pages (a device may pin them, engine/device_layers.h), and keep their storage while they
// are pooled, handed out and given back.
#pragma once
#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "core/page_vector.h"

namespace ds::zero {

class BufferPool {
 public:
  using Buffer = PageVector<std::byte>;
  // A buffer of n bytes (page-aligned), contents unspecified: the smallest free one that fits, else a
  // new one.
  Buffer acquire(size_t n);
  void release(Buffer buffer);
  // Makes `count` more free buffers of n bytes, returning their storage (which stays theirs).
  std::vector<std::span<std::byte>> reserve(size_t n, size_t count);
  size_t bytes() const { return bytes_; }  // capacity of every buffer the pool made
  // Called with the storage of every buffer the pool makes from now on (a device page-locks them).
  void on_new_buffer(std::function<void(std::span<std::byte>)> hook) { on_new_ = std::move(hook); }

 private:
  Buffer make(size_t n);
  std::vector<Buffer> free_;
  std::function<void(std::span<std::byte>)> on_new_;
  size_t bytes_ = 0;
};

}  // namespace ds::zero
