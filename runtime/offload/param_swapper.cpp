// The parameter partition in memory and a swap file (see param_swapper.h).
#include "offload/param_swapper.h"

#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace ds::offload {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace


ParamSwapper::ParamSwapper(const std::vector<size_t>& chunk_bytes, const std::vector<bool>& kept, size_t buffer_count,
                           const std::string& dir, const AioConfig& aio, bool allow_buffered, const std::string& what)
    : chunk_bytes_(chunk_bytes), kept_(kept), what_(what) {
  if (buffer_count < 1) throw std::invalid_argument(fmt::format("{}: buffer_count must be >= 1", what));
  size_t in_memory = 0, in_file = 0;
  for (size_t u = 0; u < chunk_bytes_.size(); ++u) {
    if (chunk_bytes_[u] == 0) kept_[u] = true;
    offset_.push_back(kept_[u] ? in_memory : in_file);
    if (kept_[u]) {
      in_memory += chunk_bytes_[u];
    } else {
      in_file += io_bytes(u);
      region_ = std::max(region_, io_bytes(u));
    }
  }
  memory_.assign(in_memory, std::byte{0});
  if (in_file == 0) return;  // everything fits in memory: no file, no buffers
  file_ = std::make_unique<SwapFile>(dir, in_file, allow_buffered, what);
  buffers_.resize(buffer_count);
  for (Buffer& b : buffers_) b.data = direct_buffer(region_);
  aio_ = std::make_unique<AioQueue>(aio);
}

ParamSwapper::~ParamSwapper() {
  for (Buffer& b : buffers_) {  // leave no request behind
    try {
      finish(b);
    } catch (const std::runtime_error&) {
    }
  }
}

const std::byte* ParamSwapper::in_memory(size_t unit) const {
  return kept_[unit] ? memory_.data() + offset_[unit] : nullptr;
}

std::byte* ParamSwapper::memory(size_t unit) { return kept_[unit] ? memory_.data() + offset_[unit] : nullptr; }

bool ParamSwapper::can_read() const {
  for (const Buffer& b : buffers_)
    if (b.use == Use::Free || b.use == Use::Writing) return true;
  return false;
}

ParamSwapper::Buffer* ParamSwapper::oldest(size_t unit, Use use) {
  Buffer* found = nullptr;
  for (Buffer& b : buffers_)
    if (b.use == use && b.unit == unit && (!found || b.order < found->order)) found = &b;
  return found;
}

void ParamSwapper::finish(Buffer& b) {
  if (b.ticket != 0) {
    const auto start = Clock::now();
    const AioQueue::Ticket t = b.ticket;
    b.ticket = 0;
    aio_->wait(t);
    stats_.wait_seconds += since(start);
  }
  if (b.use == Use::Writing) b.use = Use::Free;
  if (b.use == Use::Reading) b.use = Use::Held;
}

ParamSwapper::Buffer& ParamSwapper::take() {
  Buffer* pick = nullptr;
  for (Buffer& b : buffers_) {
    if (b.use == Use::Free) {
      pick = &b;
      break;
    }
    if (b.use == Use::Writing && (!pick || b.order < pick->order)) pick = &b;
  }
  if (!pick) throw std::logic_error(fmt::format("{}: every parameter swap buffer is in use", what_));
  finish(*pick);
  pick->order = ++taken_;
  return *pick;
}

void ParamSwapper::wait_writes(size_t unit) {
  while (Buffer* b = oldest(unit, Use::Writing)) finish(*b);
}

void ParamSwapper::read(size_t unit) {
  if (kept_[unit]) throw std::logic_error(fmt::format("ParamSwapper: unit {} is in memory", unit));
  wait_writes(unit);
  Buffer& b = take();
  b.use = Use::Reading;
  b.unit = unit;
  b.ticket = aio_->read(file_->fd(), b.data.get(), io_bytes(unit), offset_[unit], what_);
  stats_.bytes_read += io_bytes(unit);
}

const std::byte* ParamSwapper::wait(size_t unit) {
  Buffer* b = oldest(unit, Use::Reading);
  if (!b) throw std::logic_error(fmt::format("ParamSwapper: unit {} has no read in flight", unit));
  finish(*b);
  return b->data.get();
}

void ParamSwapper::release(size_t unit) {
  Buffer* b = oldest(unit, Use::Held);
  if (!b) throw std::logic_error(fmt::format("ParamSwapper: unit {} holds no buffer", unit));
  b->use = Use::Free;
}

std::byte* ParamSwapper::stage(size_t unit) {
  if (kept_[unit]) throw std::logic_error(fmt::format("ParamSwapper: unit {} is in memory", unit));
  wait_writes(unit);  // an earlier write of the unit must not land after this one
  Buffer& b = take();
  b.use = Use::Staged;
  b.unit = unit;
  std::memset(b.data.get() + chunk_bytes_[unit], 0, io_bytes(unit) - chunk_bytes_[unit]);
  return b.data.get();
}

void ParamSwapper::commit(size_t unit) {
  Buffer* b = oldest(unit, Use::Staged);
  if (!b) throw std::logic_error(fmt::format("ParamSwapper: unit {} was not staged", unit));
  b->use = Use::Writing;
  b->ticket = aio_->write(file_->fd(), b->data.get(), io_bytes(unit), offset_[unit], what_);
  stats_.bytes_written += io_bytes(unit);
}

void ParamSwapper::read_now(size_t unit, std::byte* out) {
  if (kept_[unit]) throw std::logic_error(fmt::format("ParamSwapper: unit {} is in memory", unit));
  wait_writes(unit);
  const DirectBuffer bounce = direct_buffer(io_bytes(unit));
  const auto start = Clock::now();
  aio_->wait(aio_->read(file_->fd(), bounce.get(), io_bytes(unit), offset_[unit], what_));
  stats_.wait_seconds += since(start);
  stats_.bytes_read += io_bytes(unit);
  std::memcpy(out, bounce.get(), chunk_bytes_[unit]);
}

SwapStats ParamSwapper::stats() const {
  SwapStats s = stats_;
  if (aio_) {
    s.read_seconds = aio_->read_busy_seconds();
    s.write_seconds = aio_->write_busy_seconds();
  }
  return s;
}

}  // namespace ds::offload
