// The fanout transports (pdsh, openmpi, mpich, slurm): one run of the tool for the whole job
// (fanout_tools.h builds its command line) starts `dsrun agent --listen` on every node. The tools
// give a remote command no stdin (or not to every node), so the control channel cannot be the
// session's stdin/stdout as with the ssh transport: each agent listens on a TCP port and prints the
// port and a one-time key, which reach dsrun on the tool's stdout (inside SSH, or Slurm's own
// channel); dsrun connects to the host, presents the key, and speaks the same protocol over that
// connection (agent_listen.cpp). Agents' stderr reaches dsrun as the tool's prefixed output.
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent_link.h"
#include "errors.h"
#include "fanout_tools.h"
#include "process.h"
#include "text.h"

namespace dsrun {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kListening = "#dsrun-agent-listening ";

std::string bare_host(const std::string& host) { return host.substr(host.find('@') + 1); }

struct Endpoint {
  int port = 0;
  std::string key;
};

// The one tool process of a job, and the thread that reads its output.
class Fanout {
 public:
  Fanout(const std::string& launcher, std::vector<std::string> hosts, const LaunchOptions& o, EventQueue& events)
      : launcher_(launcher), hosts_(std::move(hosts)), events_(events) {
    FanoutCommand command = fanout_command(launcher_, hosts_, o);
    hostfile_ = command.hostfile;
    Spawned child = spawn_process(command.program, command.argv, command.env, {});
    pid_ = child.pid;
    out_ = std::move(child.out);
    err_ = std::move(child.err);
    if (child.exec_errno != 0) {
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      remove_hostfile();
      throw LaunchError(fmt::format("--launcher {}: cannot execute {}: {}", launcher_, command.program,
                                    std::strerror(child.exec_errno)));
    }
    reader_ = std::thread([this] { read_loop(); });
  }

  ~Fanout() {
    std::unique_lock lock(mutex_);
    // The agents end once their connections close; their sessions, and the tool, follow.
    if (!changed_.wait_for(lock, std::chrono::seconds(10), [&] { return ended_; })) {
      ::kill(-pid_, SIGTERM);
      if (!changed_.wait_for(lock, std::chrono::seconds(2), [&] { return ended_; })) ::kill(-pid_, SIGKILL);
    }
    lock.unlock();
    reader_.join();
    remove_hostfile();
  }

  // The port and key node `node`'s agent printed. Throws LaunchError when the tool ended first, at
  // `deadline`, or after interrupt().
  Endpoint wait_endpoint(int node, Clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, deadline, [&] { return endpoints_.count(node) || ended_ || interrupted_; });
    if (auto it = endpoints_.find(node); it != endpoints_.end()) return it->second;
    const std::string& host = hosts_[static_cast<size_t>(node)];
    if (interrupted_) throw LaunchError(fmt::format("{} to {}: cancelled", launcher_, host));
    if (ended_ && endpoints_.empty())  // the tool itself failed (an unknown node, no allocation...)
      throw LaunchError(fmt::format("{} ended ({}) before starting any agent; its own messages are above", launcher_,
                                    describe_exit(code_, signal_)));
    if (ended_)
      throw LaunchError(fmt::format("{} to {}: {} ended ({}) before the agent there started (is dsrun installed "
                                    "at that path there? see --remote_dsrun)", launcher_, host, launcher_,
                                    describe_exit(code_, signal_)));
    throw LaunchError(fmt::format("{} to {}: no agent started within {:.0f} s", launcher_, host,
                                  std::chrono::duration<double>(deadline - started_).count()));
  }

  const std::string& launcher() const { return launcher_; }

  void interrupt() {
    {
      std::lock_guard lock(mutex_);
      interrupted_ = true;
    }
    changed_.notify_all();
  }

 private:
  void remove_hostfile() {
    if (!hostfile_.empty()) ::unlink(hostfile_.c_str());
    hostfile_.clear();
  }

  void on_line(bool is_stderr, std::string_view line) {
    std::string_view text = line;
    int node = take_node_prefix(launcher_, text, hosts_);
    if (!is_stderr) {
      if (text.rfind(kListening, 0) != 0) return;  // a login shell's chatter
      int n = -1, port = 0;
      char key[65] = {};
      if (std::sscanf(std::string(text.substr(kListening.size())).c_str(), "%d %d %64s", &n, &port, key) != 3) return;
      if (node < 0) node = n;
      if (node < 0 || node >= static_cast<int>(hosts_.size())) return;
      {
        std::lock_guard lock(mutex_);
        endpoints_[node] = Endpoint{port, key};
      }
      changed_.notify_all();
      return;
    }
    if (node < 0 || node >= static_cast<int>(hosts_.size()))
      return events_.post(AgentDiagnostic{-1, fmt::format("{}: {}", launcher_, line)});
    events_.post(AgentDiagnostic{node, std::string(text)});
  }

  void read_loop() {
    std::string pending[2];
    int fds[2] = {out_.get(), err_.get()};
    while (fds[0] >= 0 || fds[1] >= 0) {
      pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
      for (int s = 0; s < 2; ++s) {
        if (fds[s] < 0 || !p[s].revents) continue;
        char buf[8192];
        ssize_t n = ::read(fds[s], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          if (!pending[s].empty()) on_line(s == 1, pending[s]);
          fds[s] = -1;
          continue;
        }
        pending[s].append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = pending[s].find('\n')) != std::string::npos) {
          on_line(s == 1, std::string_view(pending[s]).substr(0, nl));
          pending[s].erase(0, nl + 1);
        }
      }
    }
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    {
      std::lock_guard lock(mutex_);
      ended_ = true;
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
      signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    }
    changed_.notify_all();
  }

  const std::string launcher_;
  std::vector<std::string> hosts_;
  EventQueue& events_;
  std::string hostfile_;  // the tool's host list file, if it needs one
  const Clock::time_point started_ = Clock::now();
  pid_t pid_ = -1;  // also its process group
  UniqueFd out_, err_;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, Endpoint> endpoints_;
  bool ended_ = false, interrupted_ = false;
  int code_ = 0, signal_ = 0;
};

class FanoutLink : public AgentLink {
 public:
  FanoutLink(int node, const std::string& host, std::shared_ptr<Fanout> fanout, int timeout_s, EventQueue& events)
      : AgentLink(node, host, events), fanout_(std::move(fanout)), timeout_s_(timeout_s) {}
  ~FanoutLink() override {
    close();
    join();
    if (sock_ >= 0) ::close(sock_);
  }

 protected:
  std::string open() override {
    const Endpoint e = fanout_->wait_endpoint(node_, Clock::now() + std::chrono::seconds(2 * timeout_s_ + 6));  // the launcher's connect deadline comes first
    const std::string host = bare_host(host_);
    addrinfo hints{}, *list = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (int rc = ::getaddrinfo(host.c_str(), std::to_string(e.port).c_str(), &hints, &list); rc != 0)
      throw LaunchError(fmt::format("{} to {}: cannot resolve '{}': {}", fanout_->launcher(), host_, host, ::gai_strerror(rc)));
    std::string error = "no address";
    for (addrinfo* ai = list; ai && sock_ < 0; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      timeval limit{timeout_s_, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);  // bounds connect() too
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        sock_ = fd;
      } else {
        error = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(list);
    if (sock_ < 0)
      throw LaunchError(fmt::format("{} to {}: cannot connect to its agent on port {}: {} (the launcher must reach "
                                    "the hosts on ephemeral TCP ports)", fanout_->launcher(), host_, e.port, error));
    if (!write_all(sock_, e.key + "\n")) throw LaunchError(fmt::format("{} to {}: the agent's connection broke", fanout_->launcher(), host_));
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    char text[NI_MAXHOST] = {};
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&peer), &length) == 0)
      ::getnameinfo(reinterpret_cast<sockaddr*>(&peer), length, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
    std::string address = text;
    if (address.rfind("::ffff:", 0) == 0) address.erase(0, 7);
    return address;
  }

  std::vector<int> poll_fds() override { return {sock_}; }

  bool pump() override {
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(sock_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        on_stdout(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }

  bool write(const std::string& bytes) override { return write_all(sock_, bytes); }

  std::string shutdown(bool) override {
    if (sock_ >= 0) ::shutdown(sock_, SHUT_RDWR);  // the agent sees its control channel close
    return "";
  }

  void interrupt() override { fanout_->interrupt(); }

 private:
  std::shared_ptr<Fanout> fanout_;
  const int timeout_s_;
  int sock_ = -1;
};

}  // namespace

std::vector<std::unique_ptr<AgentLink>> make_fanout_links(const std::string& launcher,
                                                          const std::vector<std::string>& hosts,
                                                          const LaunchOptions& options, EventQueue& events) {
  auto fanout = std::make_shared<Fanout>(launcher, hosts, options, events);
  std::vector<std::unique_ptr<AgentLink>> links;
  for (size_t i = 0; i < hosts.size(); ++i)
    links.push_back(std::make_unique<FanoutLink>(static_cast<int>(i), hosts[i], fanout, options.ssh_timeout_s, events));
  return links;
}

}  // namespace dsrun
