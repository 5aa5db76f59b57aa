// Best-fit reuse of byte buffers (see buffer_pool.h).
#include "zero/buffer_pool.h"

#include <utility>

namespace ds::zero {

std::vector<std::byte> BufferPool::acquire(size_t n) {
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].capacity() >= n && (best == free_.size() || free_[i].capacity() < free_[best].capacity())) best = i;
  if (best == free_.size()) {
    std::vector<std::byte> fresh(n);
    bytes_ += fresh.capacity();
    return fresh;
  }
  std::vector<std::byte> reused = std::move(free_[best]);
  free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  reused.resize(n);  // within capacity: no allocation
  return reused;
}

void BufferPool::release(std::vector<std::byte> buffer) {
  if (buffer.capacity() > 0) free_.push_back(std::move(buffer));
}

}  // namespace ds::zero
