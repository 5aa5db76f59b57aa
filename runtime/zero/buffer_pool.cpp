// Best-fit reuse of byte buffers (see buffer_pool.h).
#include "zero/buffer_pool.h"

#include <utility>

namespace ds::zero {

BufferPool::Buffer BufferPool::acquire(size_t n) {
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].capacity() >= n && (best == free_.size() || free_[i].capacity() < free_[best].capacity())) best = i;
  if (best == free_.size()) return make(n);
  Buffer reused = std::move(free_[best]);
  free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  reused.resize(n);  // within capacity: no allocation
  return reused;
}

void BufferPool::release(Buffer buffer) {
  if (buffer.capacity() > 0) free_.push_back(std::move(buffer));
}

std::vector<std::span<std::byte>> BufferPool::reserve(size_t n, size_t count) {
  std::vector<std::span<std::byte>> made;
  for (size_t k = 0; k < count && n > 0; ++k) {
    Buffer fresh = make(n);
    made.emplace_back(fresh.data(), fresh.capacity());
    free_.push_back(std::move(fresh));
  }
  return made;
}

BufferPool::Buffer BufferPool::make(size_t n) {
  Buffer fresh(n);
  bytes_ += fresh.capacity();
  if (on_new_ && fresh.capacity() > 0) on_new_(std::span<std::byte>(fresh.data(), fresh.capacity()));
  return fresh;
}

}  // namespace ds::zero
