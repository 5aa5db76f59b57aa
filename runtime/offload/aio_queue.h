// Asynchronous file I/O through io_uring (liburing) for ZeRO-Infinity's swap files. A request of any
// size is cut into `block_size` pieces, of which at most `queue_depth` are in flight; a thread of
// its own submits and reaps them, so the I/O proceeds while the caller computes. Short transfers
// are resubmitted for the rest. wait() returns when every piece of a request is done, or throws
// std::runtime_error naming the file, offset and error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ds::offload {

// DeepSpeed's `aio` block (deepspeed/runtime/swap_tensor/aio_config.py), as io_uring uses it.
struct AioConfig {
  int64_t block_size = 1 << 20;  // bytes per request piece
  int64_t queue_depth = 8;       // pieces in flight
  bool single_submit = false;    // one io_uring_submit per piece, not per batch
  bool overlap_events = true;    // refill as pieces complete; false: wait out each batch
};

class AioQueue {
 public:
  using Ticket = uint64_t;

  explicit AioQueue(const AioConfig& config);
  ~AioQueue();
  AioQueue(const AioQueue&) = delete;
  AioQueue& operator=(const AioQueue&) = delete;

  // `bytes` from/to `buffer` at `offset` of `fd`; `what` names the file in errors. The buffer must
  // stay valid until wait() returns for the ticket.
  Ticket read(int fd, void* buffer, size_t bytes, uint64_t offset, const std::string& what);
  Ticket write(int fd, const void* buffer, size_t bytes, uint64_t offset, const std::string& what);
  void wait(Ticket ticket);
  // Seconds during which at least one read (write) piece was in flight, so far.
  double read_busy_seconds() const;
  double write_busy_seconds() const;

 private:
  struct State;
  Ticket enqueue(int fd, bool write, void* buffer, size_t bytes, uint64_t offset, const std::string& what);
  std::unique_ptr<State> state_;
};

}  // namespace ds::offload
