// The transport-independent half of an agent link: its thread, framing and stderr relay.
#include "agent_link.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include "errors.h"

namespace dsrun {

AgentLink::AgentLink(int node, std::string host, EventQueue& events)
    : node_(node), host_(std::move(host)), events_(events), wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

AgentLink::~AgentLink() {
  close();
  join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void AgentLink::start() { thread_ = std::thread([this] { run(); }); }

void AgentLink::join() {
  if (thread_.joinable()) thread_.join();
}

void AgentLink::send(const protocol::Message& message) {
  {
    std::lock_guard lock(mutex_);
    outbox_ += protocol::encode(message);
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void AgentLink::close() {
  close_requested_ = true;
  interrupt();
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void AgentLink::flush_outbox() {
  std::string bytes;
  {
    std::lock_guard lock(mutex_);
    bytes.swap(outbox_);
  }
  if (!bytes.empty() && !write(bytes)) protocol_error_ = "the control channel to the agent broke";
}

void AgentLink::on_stdout(const char* data, size_t size) {
  if (!synced_) {
    presync_.append(data, size);
    size_t at = presync_.find(protocol::kPreamble);
    if (at == std::string::npos) {
      if (presync_.size() > 65536) presync_.erase(0, presync_.size() - protocol::kPreamble.size());
      return;
    }
    synced_ = true;
    std::string rest = presync_.substr(at + protocol::kPreamble.size());
    presync_.clear();
    decoder_.feed(rest.data(), rest.size());
  } else {
    decoder_.feed(data, size);
  }
  try {
    while (auto m = decoder_.next()) {
      if (std::holds_alternative<protocol::Hello>(*m) && !said_hello_) {
        said_hello_ = true;
        const auto& hello = std::get<protocol::Hello>(*m);
        if (hello.version != protocol::kVersion) {
          protocol_error_ = fmt::format("the agent speaks protocol version {}, this dsrun {} (same dsrun build on "
                                        "every host? see --remote_dsrun)", hello.version, protocol::kVersion);
          return;
        }
        events_.post(LinkReady{node_, peer_});
        continue;
      }
      events_.post(AgentMessage{node_, std::move(*m)});
    }
  } catch (const std::exception& e) {
    protocol_error_ = e.what();
  }
}

void AgentLink::on_stderr(const char* data, size_t size) {
  stderr_line_.append(data, size);
  size_t nl;
  while ((nl = stderr_line_.find('\n')) != std::string::npos) {
    events_.post(AgentDiagnostic{node_, stderr_line_.substr(0, nl)});
    stderr_line_.erase(0, nl + 1);
  }
}

void AgentLink::run() {
  try {
    peer_ = open();
  } catch (const std::exception& e) {
    events_.post(LinkClosed{node_, e.what()});
    return;
  }
  bool forced = false;
  for (;;) {
    if (close_requested_) {
      forced = true;
      break;
    }
    flush_outbox();
    if (!pump() || !protocol_error_.empty()) break;
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_, POLLIN, 0});
    for (int fd : poll_fds()) fds.push_back({fd, POLLIN, 0});
    // The timeout only bounds how long data buffered inside a transport library could wait.
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents) {
      uint64_t count;
      (void)!::read(wake_fd_, &count, sizeof(count));
    }
  }
  std::string ended = shutdown(forced || !protocol_error_.empty());
  if (!stderr_line_.empty()) events_.post(AgentDiagnostic{node_, stderr_line_});
  std::string error;
  if (!protocol_error_.empty())
    error = fmt::format("{}: {}", host_, protocol_error_);
  else if (!said_hello_)
    error = fmt::format("{}: could not start the agent: {} (is dsrun installed at that path there? see --remote_dsrun)",
                        host_, ended.empty() ? "it ended before saying hello" : ended);
  else if (!forced && !ended.empty())
    error = fmt::format("{}: {}", host_, ended);
  events_.post(LinkClosed{node_, error});
}

}  // namespace dsrun
