// A connection from the launcher to one node agent. Each link runs on its own thread: it opens
// the transport (fork/exec locally, or an SSH session and channel), waits for the agent's Hello,
// then relays frames both ways until the agent is done or the link is closed. Subclasses supply
// only the transport; framing, the stderr relay and the thread live here.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "events.h"
#include "options.h"
#include "protocol.h"

namespace dsrun {

class AgentLink {
 public:
  AgentLink(int node, std::string host, EventQueue& events);
  virtual ~AgentLink();
  // Starts the link's thread (connect, then relay). Posts LinkReady or LinkClosed.
  void start();
  // Queues a message for the agent; never blocks.
  void send(const protocol::Message& message);
  // Drops the connection: the agent sees its control channel close and kills its ranks.
  void close();
  // Waits for the link's thread to end.
  void join();

 protected:
  // Blocking connect; returns the peer address (may be empty). Throws LaunchError.
  virtual std::string open() = 0;
  // File descriptors to poll for input from the agent.
  virtual std::vector<int> poll_fds() = 0;
  // Reads whatever is available without blocking, calling on_stdout/on_stderr; false at end of stream.
  virtual bool pump() = 0;
  // Writes bytes to the agent's stdin; false if the channel is broken.
  virtual bool write(const std::string& bytes) = 0;
  // Ends the session; called on the link's thread. Returns an error text if the agent ended badly.
  virtual std::string shutdown(bool forced) = 0;
  // Called by close() on any thread: a blocking open() should give up (default: nothing).
  virtual void interrupt() {}

  void on_stdout(const char* data, size_t size);
  void on_stderr(const char* data, size_t size);

  const int node_;
  const std::string host_;

 private:
  void run();
  void flush_outbox();

  EventQueue& events_;
  std::thread thread_;
  int wake_fd_ = -1;  // eventfd: new outbox entries or close()
  std::mutex mutex_;
  std::string outbox_;
  std::atomic<bool> close_requested_{false};
  protocol::Decoder decoder_;
  bool synced_ = false;       // the agent's preamble has been seen on stdout
  std::string presync_;       // stdout bytes before the preamble (e.g. from a chatty login shell)
  std::string stderr_line_;
  bool said_hello_ = false;
  std::string peer_;
  std::string protocol_error_;
};

// Starts `dsrun agent` on this machine as a child process.
std::unique_ptr<AgentLink> make_local_link(int node, const std::string& host, EventQueue& events);
// Starts the agent on `host` over SSH (libssh), as configured by the ssh options.
std::unique_ptr<AgentLink> make_ssh_link(int node, const std::string& host, const LaunchOptions& options,
                                         EventQueue& events);
// Starts one agent per host through a single run of a cluster tool (pdsh, openmpi, mpich, slurm;
// fanout_link.cpp); link i is `hosts[i]`'s.
std::vector<std::unique_ptr<AgentLink>> make_fanout_links(const std::string& launcher,
                                                          const std::vector<std::string>& hosts,
                                                          const LaunchOptions& options, EventQueue& events);

}  // namespace dsrun
