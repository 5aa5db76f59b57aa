// The io_uring queue (see aio_queue.h): requests are split into pieces on a deque; the queue's thread
// keeps up to queue_depth pieces in the ring and counts each request's pieces down as they complete.
#include "offload/aio_queue.h"

#include <liburing.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <map>

#include <fmt/format.h>

namespace ds::offload {
namespace {

struct Piece {
  AioQueue::Ticket ticket;
  int fd;
  bool write;
  std::byte* buffer;
  size_t bytes;
  uint64_t offset;
};

struct Request {
  size_t left = 0;    // pieces not yet done
  std::string what;   // the file, for errors
  std::string error;  // the first failure
};

}  // namespace

struct AioQueue::State {
  AioConfig config;
  io_uring ring{};
  std::mutex mutex;
  std::condition_variable work;  // pieces queued, or stop
  std::condition_variable done;  // a request finished
  std::deque<Piece> queue;       // pieces not yet in the ring
  std::map<Ticket, Request> requests;  // node-based: wait() keeps an iterator across waits
  Ticket next = 1;
  bool stop = false;
  std::thread thread;
  // Busy time per direction: pieces in flight, since when, and the seconds accumulated.
  struct Busy {
    size_t in_flight = 0;
    std::chrono::steady_clock::time_point since;
    double seconds = 0.0;
    void started() {
      if (in_flight++ == 0) since = std::chrono::steady_clock::now();
    }
    void ended() {
      if (--in_flight == 0) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    }
  } reads, writes;

  void run();
  void reap(size_t& in_flight);
};

void AioQueue::State::run() {
  const auto depth = static_cast<size_t>(config.queue_depth);
  size_t in_flight = 0;
  std::unique_lock lock(mutex);
  while (true) {
    if (in_flight == 0) work.wait(lock, [&] { return stop || !queue.empty(); });
    if (in_flight == 0 && queue.empty()) return;  // stopped, nothing left
    size_t prepared = 0;
    while ((config.overlap_events || in_flight == 0 || prepared > 0) && !queue.empty() && in_flight < depth) {
      auto* piece = new Piece(queue.front());
      queue.pop_front();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (piece->write)
        io_uring_prep_write(sqe, piece->fd, piece->buffer, static_cast<unsigned>(piece->bytes), piece->offset);
      else
        io_uring_prep_read(sqe, piece->fd, piece->buffer, static_cast<unsigned>(piece->bytes), piece->offset);
      io_uring_sqe_set_data(sqe, piece);
      (piece->write ? writes : reads).started();
      ++in_flight;
      ++prepared;
      if (config.single_submit) io_uring_submit(&ring);
    }
    if (prepared > 0 && !config.single_submit) io_uring_submit(&ring);
    lock.unlock();
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec wake{0, 1'000'000};  // look for new requests at least every millisecond
    io_uring_wait_cqe_timeout(&ring, &cqe, &wake);
    lock.lock();
    reap(in_flight);
  }
}

void AioQueue::State::reap(size_t& in_flight) {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring, &cqe) == 0) {
    auto* piece = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    (piece->write ? writes : reads).ended();
    Request& request = requests[piece->ticket];
    if (res > 0 && static_cast<size_t>(res) < piece->bytes) {  // short: the rest goes again, first
      piece->buffer += res;
      piece->bytes -= static_cast<size_t>(res);
      piece->offset += static_cast<uint64_t>(res);
      queue.push_front(*piece);
      delete piece;
      continue;
    }
    if (res <= 0 && request.error.empty())
      request.error = fmt::format("{}: {} of {} bytes at offset {} failed: {}", request.what,
                                  piece->write ? "write" : "read", piece->bytes, piece->offset,
                                  res < 0 ? std::strerror(-res) : "end of file");
    delete piece;
    if (--request.left == 0) done.notify_all();
  }
}

AioQueue::AioQueue(const AioConfig& config) : state_(std::make_unique<State>()) {
  if (config.block_size < 512 || config.block_size % 512 != 0 || config.block_size > (1 << 30))
    throw std::invalid_argument(fmt::format("aio.block_size: {} must be a multiple of 512 up to 1 GiB", config.block_size));
  if (config.queue_depth < 1 || config.queue_depth > 4096)
    throw std::invalid_argument(fmt::format("aio.queue_depth: {} must be 1 to 4096", config.queue_depth));
  state_->config = config;
  const int rc = io_uring_queue_init(static_cast<unsigned>(config.queue_depth), &state_->ring, 0);
  if (rc < 0)
    throw std::runtime_error(fmt::format("io_uring could not be set up: {} (is io_uring disabled, e.g. by "
                                         "kernel.io_uring_disabled or a seccomp profile?)", std::strerror(-rc)));
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

AioQueue::~AioQueue() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->work.notify_all();
  state_->thread.join();  // finishes what was queued first: its buffers are still valid
  io_uring_queue_exit(&state_->ring);
}

AioQueue::Ticket AioQueue::enqueue(int fd, bool write, void* buffer, size_t bytes, uint64_t offset,
                                   const std::string& what) {
  const auto block = static_cast<size_t>(state_->config.block_size);
  std::lock_guard lock(state_->mutex);
  const Ticket ticket = state_->next++;
  Request& request = state_->requests[ticket];
  request.what = what;
  auto* at = static_cast<std::byte*>(buffer);
  for (size_t done = 0; done < bytes; done += block) {
    state_->queue.push_back(Piece{ticket, fd, write, at + done, std::min(block, bytes - done), offset + done});
    ++request.left;
  }
  state_->work.notify_all();
  return ticket;
}

AioQueue::Ticket AioQueue::read(int fd, void* buffer, size_t bytes, uint64_t offset, const std::string& what) {
  return enqueue(fd, false, buffer, bytes, offset, what);
}

AioQueue::Ticket AioQueue::write(int fd, const void* buffer, size_t bytes, uint64_t offset, const std::string& what) {
  return enqueue(fd, true, const_cast<void*>(buffer), bytes, offset, what);
}

double AioQueue::read_busy_seconds() const {
  std::lock_guard lock(state_->mutex);
  return state_->reads.seconds;
}

double AioQueue::write_busy_seconds() const {
  std::lock_guard lock(state_->mutex);
  return state_->writes.seconds;
}

void AioQueue::wait(Ticket ticket) {
  std::unique_lock lock(state_->mutex);
  auto it = state_->requests.find(ticket);
  if (it == state_->requests.end()) throw std::logic_error(fmt::format("AioQueue: unknown ticket {}", ticket));
  state_->done.wait(lock, [&] { return it->second.left == 0; });
  const std::string error = std::move(it->second.error);
  state_->requests.erase(it);
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace ds::offload
