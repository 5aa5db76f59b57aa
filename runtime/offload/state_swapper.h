// ZeRO-Infinity's optimizer state on NVMe: a few arrays of the same n elements (the fp32 master
// copy and the optimizer's moments: "streams") in one swap file, cut into sub-groups of at most
// `sub_group` elements (balanced: as many as that needs, of equal size) that are processed in order
// through `buffer_count` aligned buffers. While sub-group g is worked on, the write-back of g-1 and
// the reads of g+1 … g+B-2 are in flight (B >= 3; with 2 buffers a read overlaps the previous write
// only, with 1 nothing overlaps). prefetch() starts the first reads early (the engine calls it as a
// step begins, so they overlap forward and backward), and a pass returns with its last write-backs
// still in flight.
//
// File layout: sub-group g fills region g, [g·R, (g+1)·R) with R = Σ_s align(sub_group · bytes_s);
// inside a region the streams follow one another, each aligned, as in a buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "offload/aio_queue.h"
#include "offload/swap_file.h"

namespace ds::offload {

// Where and how ZeRO-Infinity swaps (zero_optimization.offload_optimizer with device nvme).
struct SwapConfig {
  std::string dir;                    // offload_optimizer.nvme_path
  size_t sub_group = 1'000'000'000;   // elements per sub-group (zero_optimization.sub_group_size)
  size_t buffer_count = 4;            // offload_optimizer.buffer_count
  AioConfig aio;                      // the `aio` block
  bool allow_buffered = false;        // DS_OFFLOAD_BUFFERED_IO=1: buffered I/O where O_DIRECT is missing
};

struct SwapStats {
  uint64_t bytes_read = 0, bytes_written = 0;
  double read_seconds = 0.0, write_seconds = 0.0;  // while reads / writes were in flight
  double wait_seconds = 0.0;                       // time the caller waited for I/O
};

class StateSwapper {
 public:
  // `stream_bytes`: bytes per element of each stream. `dir`/`what` as SwapFile's.
  StateSwapper(std::vector<size_t> stream_bytes, size_t elements, size_t sub_group, size_t buffer_count,
               const std::string& dir, const AioConfig& aio, bool allow_buffered, const std::string& what);

  // fn(begin, count, streams) for every sub-group in order, where streams[s] holds stream s's
  // elements [begin, begin + count): read from the file first when `read`, written back after when
  // `write`. An I/O error throws std::runtime_error.
  using Visit = std::function<void(size_t begin, size_t count, std::span<std::byte* const> streams)>;
  void pass(bool read, bool write, const Visit& fn);
  // Starts reading the first sub-groups for the next reading pass (a no-op if already started).
  void prefetch();

  size_t sub_groups() const { return (elements_ + sub_group_ - 1) / sub_group_; }
  uint64_t file_bytes() const { return file_->bytes(); }
  size_t buffer_bytes() const { return region_ * buffers_.size(); }  // memory held
  bool direct() const { return file_->direct(); }
  SwapStats stats() const;

 private:
  std::vector<size_t> stream_bytes_, stream_offset_;  // per stream: element size, offset in a region
  size_t elements_, sub_group_, region_;
  std::string what_;
  std::unique_ptr<SwapFile> file_;
  struct Buffer {
    DirectBuffer data;  // [region_]
    AioQueue::Ticket read = 0, write = 0;   // outstanding, or 0
  };
  std::vector<Buffer> buffers_;
  std::unique_ptr<AioQueue> aio_;  // after buffers_: destroyed first, finishing I/O into them
  SwapStats stats_;
  size_t prefetched_ = 0;  // sub-groups 0.. whose reads prefetch() started

  void wait(AioQueue::Ticket& ticket);
  void issue_read(size_t g);  // into g's buffer, once its write-back is done
};

}  // namespace ds::offload
