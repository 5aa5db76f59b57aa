// The sub-group pipeline of StateSwapper (see state_swapper.h).
#include "offload/state_swapper.h"

#include <chrono>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace ds::offload {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace


StateSwapper::StateSwapper(std::vector<size_t> stream_bytes, size_t elements, size_t sub_group, size_t buffer_count,
                           const std::string& dir, const AioConfig& aio, bool allow_buffered, const std::string& what)
    : stream_bytes_(std::move(stream_bytes)), elements_(elements), sub_group_(1), region_(0), what_(what) {
  if (buffer_count < 1) throw std::invalid_argument(fmt::format("{}: buffer_count must be >= 1", what));
  if (elements > 0) {  // as many sub-groups as `sub_group` asks for, of balanced sizes
    const size_t groups = (elements + std::max<size_t>(sub_group, 1) - 1) / std::max<size_t>(sub_group, 1);
    sub_group_ = (elements + groups - 1) / groups;
  }
  for (size_t bytes : stream_bytes_) {
    stream_offset_.push_back(region_);
    region_ += align_up(sub_group_ * bytes);
  }
  file_ = std::make_unique<SwapFile>(dir, static_cast<uint64_t>(region_) * sub_groups(), allow_buffered, what);
  buffers_.resize(std::min(buffer_count, std::max<size_t>(sub_groups(), 1)));
  for (Buffer& b : buffers_) b.data = direct_buffer(region_);
  aio_ = std::make_unique<AioQueue>(aio);
}

void StateSwapper::wait(AioQueue::Ticket& ticket) {
  if (ticket == 0) return;
  const auto start = Clock::now();
  const AioQueue::Ticket t = ticket;
  ticket = 0;
  aio_->wait(t);
  stats_.wait_seconds += since(start);
}

void StateSwapper::issue_read(size_t g) {
  Buffer& b = buffers_[g % buffers_.size()];
  wait(b.write);
  b.read = aio_->read(file_->fd(), b.data.get(), region_, g * region_, what_);
  stats_.bytes_read += region_;
}

void StateSwapper::prefetch() {
  if (prefetched_ > 0) return;
  const size_t n = std::min(buffers_.size(), sub_groups());
  for (size_t g = 0; g < n; ++g) issue_read(g);
  prefetched_ = n;
}

// Buffer g % B holds sub-group g. Iteration g: wait for its read, visit it, start its write-back,
// then refill the buffer of g-1 (its write-back had the visit of g to finish) with g-1+B. The last
// write-backs are left in flight: the next read into their buffers waits for them.
void StateSwapper::pass(bool read, bool write, const Visit& fn) {
  const size_t groups = sub_groups(), count_b = buffers_.size();
  auto start = [&](size_t g) {
    if (read) issue_read(g);
    else wait(buffers_[g % count_b].write);
  };
  std::vector<std::byte*> streams(stream_bytes_.size());
  try {
    if (!read)  // a prefetch is of no use to a pass that writes every buffer
      for (Buffer& b : buffers_) wait(b.read);
    for (size_t g = read ? prefetched_ : 0; g < std::min(count_b, groups); ++g) start(g);
    prefetched_ = 0;
    for (size_t g = 0; g < groups; ++g) {
      Buffer& b = buffers_[g % count_b];
      wait(b.read);
      for (size_t s = 0; s < streams.size(); ++s) streams[s] = b.data.get() + stream_offset_[s];
      const size_t begin = g * sub_group_;
      fn(begin, std::min(sub_group_, elements_ - begin), streams);
      if (write) {
        b.write = aio_->write(file_->fd(), b.data.get(), region_, g * region_, what_);
        stats_.bytes_written += region_;
      }
      if (count_b == 1 && g + 1 < groups) start(g + 1);
      if (count_b > 1 && g >= 1 && g - 1 + count_b < groups) start(g - 1 + count_b);
    }
  } catch (...) {
    prefetched_ = 0;
    for (Buffer& b : buffers_) {  // leave no request behind, then report the first failure
      try {
        wait(b.read);
        wait(b.write);
      } catch (const std::runtime_error&) {
      }
    }
    throw;
  }
}

SwapStats StateSwapper::stats() const {
  SwapStats s = stats_;
  s.read_seconds = aio_->read_busy_seconds();
  s.write_seconds = aio_->write_busy_seconds();
  return s;
}

}  // namespace ds::offload
