// ZeRO-Infinity's parameter offload (offload_param device nvme, ZeRO stage 3): this rank's chunks of
// the parameters (in their storage precision), one per unit (a layer at stage 3). The units kept in
// memory — the persistent layers and as many more as `max_in_cpu` allows — live in one buffer; the
// others in an unnamed swap file, each at a 4 KiB-aligned offset, and pass through `buffer_count`
// aligned buffers: read in ahead of their gathers (the ChunkSource side, driven by ParamFetcher) and
// written back after each update (stage, then commit). A read of a unit waits for its write-back
// still in flight; a buffer whose write-back is in flight is reused once that write is done.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_queue.h"
#include "offload/state_swapper.h"
#include "offload/swap_file.h"
#include "zero/chunk_source.h"

namespace ds::offload {

// zero_optimization.offload_param with device nvme.
struct ParamSwapConfig {
  std::string dir;                      // nvme_path
  size_t buffer_count = 5;              // buffers for chunks read in or written back
  size_t buffer_size = 100'000'000;     // elements: a swapped chunk may be at most this big
  size_t max_in_cpu = 1'000'000'000;    // elements of the partition kept in memory besides the persistent layers
  AioConfig aio;                        // the `aio` block
  bool allow_buffered = false;          // DS_OFFLOAD_BUFFERED_IO=1
};

class ParamSwapper final : public zero::ChunkSource {
 public:
  // chunk_bytes[u]: bytes of unit u's chunk; kept[u]: the unit stays in memory. `what` names the
  // setting in errors, as SwapFile's.
  ParamSwapper(const std::vector<size_t>& chunk_bytes, const std::vector<bool>& kept, size_t buffer_count,
               const std::string& dir, const AioConfig& aio, bool allow_buffered, const std::string& what);
  ~ParamSwapper() override;

  const std::byte* in_memory(size_t unit) const override;
  std::byte* memory(size_t unit);  // a kept unit's chunk, writable; null for a swapped one
  bool can_read() const override;
  void read(size_t unit) override;
  const std::byte* wait(size_t unit) override;  // the oldest read of the unit
  void release(size_t unit) override;

  // A swapped unit's new chunk: fill stage(unit)'s [chunk bytes], then commit(unit) writes it back.
  std::byte* stage(size_t unit);
  void commit(size_t unit);
  // A swapped unit's chunk read at once into `out` [chunk bytes] (evaluation, prediction).
  void read_now(size_t unit, std::byte* out);

  size_t memory_bytes() const { return memory_.size(); }     // the kept units
  size_t buffer_bytes() const { return region_ * buffers_.size(); }
  uint64_t file_bytes() const { return file_ ? file_->bytes() : 0; }
  bool direct() const { return !file_ || file_->direct(); }
  SwapStats stats() const;

 private:
  enum class Use { Free, Reading, Held, Staged, Writing };
  struct Buffer {
    DirectBuffer data;  // [region_]
    Use use = Use::Free;
    size_t unit = 0;
    uint64_t order = 0;          // when it was taken: the oldest of a unit's reads is served first
    AioQueue::Ticket ticket = 0;
  };
  Buffer& take();                         // a free buffer, waiting out the oldest write-back if need be
  Buffer* oldest(size_t unit, Use use);   // null if none
  void finish(Buffer& b);                 // waits for its I/O; the buffer is Free (Writing) or Held (Reading)
  void wait_writes(size_t unit);
  size_t io_bytes(size_t unit) const { return align_up(chunk_bytes_[unit]); }

  std::vector<size_t> chunk_bytes_;
  std::vector<size_t> offset_;        // per unit: in memory_ when kept, else in the file
  std::vector<bool> kept_;
  std::vector<std::byte> memory_;
  size_t region_ = 0;                 // bytes per buffer: the largest swapped chunk, aligned
  std::string what_;
  std::unique_ptr<SwapFile> file_;
  std::vector<Buffer> buffers_;
  std::unique_ptr<AioQueue> aio_;     // after buffers_: destroyed first, finishing I/O into them
  uint64_t taken_ = 0;
  SwapStats stats_;
};

}  // namespace ds::offload
