// The launcher's event queue: every agent link thread and the signal thread post here, and the
// launcher's main loop is its only consumer, so all job state lives on one thread.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "protocol.h"

namespace dsrun {

// The link to node `node` is up and its agent said Hello. `peer_address` is the address the
// launcher reached the host at (empty for the local transport).
struct LinkReady {
  int node;
  std::string peer_address;
};
struct AgentMessage {
  int node;
  protocol::Message message;
};
// A line the agent (or the remote shell) wrote to its stderr.
struct AgentDiagnostic {
  int node;  // -1: the transport's own tool (mpirun, srun...), about no node in particular
  std::string line;
};
// The link is gone; `error` says why when it did not end cleanly after Done.
struct LinkClosed {
  int node;
  std::string error;
};
struct SignalReceived {
  int signal;
};

using Event = std::variant<LinkReady, AgentMessage, AgentDiagnostic, LinkClosed, SignalReceived>;

class EventQueue {
 public:
  void post(Event e) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(e));
    }
    ready_.notify_one();
  }
  // The next event, or nullopt once `deadline` passes.
  std::optional<Event> wait_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_until(lock, deadline, [&] { return !events_.empty(); })) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
};

}  // namespace dsrun
