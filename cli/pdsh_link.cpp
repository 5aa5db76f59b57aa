// The pdsh transport: one `pdsh -S -w host,host,... <--launcher_args> exec '<dsrun>' agent --listen
// --node %n` for the whole job (pdsh's ssh rcmd; PDSH_SSH_ARGS_APPEND carries --ssh_port,
// --ssh_identity, --ssh_known_hosts, --ssh_accept_new and --ssh_timeout). pdsh gives a remote command
// no stdin, so the control channel cannot be the session's stdin/stdout as with the ssh transport:
// each agent listens on a TCP port and prints the port and a one-time key, which reach dsrun on pdsh's
// stdout (inside SSH); dsrun connects to the host, presents the key, and speaks the same protocol over
// that connection (agent_listen.cpp). Agents' stderr reaches dsrun as pdsh's "host: line" output.
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
#include "process.h"
#include "text.h"

extern char** environ;

namespace dsrun {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kListening = "#dsrun-agent-listening ";

std::string bare_host(const std::string& host) { return host.substr(host.find('@') + 1); }

std::string pdsh_path() {
  const char* path = std::getenv("PATH");
  return find_program("pdsh", path ? path : "/usr/bin:/bin");
}

struct Endpoint {
  int port = 0;
  std::string key;
};

// The one pdsh process of a job, and the thread that reads its output.
class PdshFanout {
 public:
  PdshFanout(std::vector<std::string> hosts, const LaunchOptions& o, EventQueue& events)
      : hosts_(std::move(hosts)), events_(events) {
    const std::string pdsh = pdsh_path();
    if (pdsh.empty()) check_pdsh_installed();
    const std::string remote = o.remote_dsrun.empty() ? self_executable() : o.remote_dsrun;
    if (remote.find('%') != std::string::npos)
      throw InputError(fmt::format("--remote_dsrun '{}': pdsh would read '%' as its own substitution", remote));
    for (const auto& h : hosts_)
      if (h.empty() || h[0] == '-' || h.find_first_of(",[]^") != std::string::npos)
        throw InputError(fmt::format("--launcher pdsh: host '{}' cannot be given to pdsh -w (its host-list syntax "
                                     "reads ',', '[', ']', '^' and a leading '-')", h));
    std::vector<std::string> argv = {"pdsh", "-S", "-f", "1024", "-w", fmt::format("{}", fmt::join(hosts_, ","))};
    for (auto& word : split_shell_words(o.launcher_args, "--launcher_args")) argv.push_back(std::move(word));
    argv.push_back("exec " + single_quote(remote) + " agent --listen --node %n");

    std::vector<std::string> ssh_args;  // pdsh splits PDSH_SSH_ARGS_APPEND at whitespace: no value may hold any
    auto add = [&](const std::string& flag, const std::string& value, const char* option) {
      if (value.find_first_of(kWhitespace) != std::string::npos)
        throw InputError(fmt::format("{} '{}': pdsh cannot pass a value with whitespace to ssh", option, value));
      ssh_args.push_back(flag);
      ssh_args.push_back(value);
    };
    if (o.ssh_port > 0) add("-p", std::to_string(o.ssh_port), "--ssh_port");
    if (!o.ssh_identity.empty()) add("-i", o.ssh_identity, "--ssh_identity");
    if (!o.ssh_known_hosts.empty()) add("-o", "UserKnownHostsFile=" + o.ssh_known_hosts, "--ssh_known_hosts");
    if (o.ssh_accept_new) add("-o", "StrictHostKeyChecking=accept-new", "--ssh_accept_new");
    add("-o", fmt::format("ConnectTimeout={}", o.ssh_timeout_s), "--ssh_timeout");
    add("-o", "BatchMode=yes", "");  // never prompt: there is no terminal behind pdsh
    std::vector<std::string> env;
    std::string append, rcmd = "ssh";
    for (char** e = environ; *e; ++e) {
      std::string_view entry(*e);
      if (entry.rfind("PDSH_SSH_ARGS_APPEND=", 0) == 0) append = std::string(entry.substr(21)) + " ";
      else if (entry.rfind("PDSH_RCMD_TYPE=", 0) == 0) rcmd = std::string(entry.substr(15));
      else env.emplace_back(entry);
    }
    env.push_back("PDSH_RCMD_TYPE=" + rcmd);  // the user's choice stands (DeepSpeed overwrites it)
    env.push_back(fmt::format("PDSH_SSH_ARGS_APPEND={}{}", append, fmt::join(ssh_args, " ")));

    Spawned child = spawn_process(pdsh, argv, env, {});
    pid_ = child.pid;
    out_ = std::move(child.out);
    err_ = std::move(child.err);
    if (child.exec_errno != 0) {
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      throw LaunchError(fmt::format("--launcher pdsh: cannot execute {}: {}", pdsh, std::strerror(child.exec_errno)));
    }
    reader_ = std::thread([this] { read_loop(); });
  }

  ~PdshFanout() {
    std::unique_lock lock(mutex_);
    // The agents end once their connections close; their sessions, and pdsh, follow.
    if (!changed_.wait_for(lock, std::chrono::seconds(10), [&] { return ended_; })) {
      ::kill(-pid_, SIGTERM);
      if (!changed_.wait_for(lock, std::chrono::seconds(2), [&] { return ended_; })) ::kill(-pid_, SIGKILL);
    }
    lock.unlock();
    reader_.join();
  }

  // The port and key node `node`'s agent printed. Throws LaunchError when pdsh ended first, at
  // `deadline`, or after interrupt().
  Endpoint wait_endpoint(int node, Clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, deadline, [&] { return endpoints_.count(node) || ended_ || interrupted_; });
    if (auto it = endpoints_.find(node); it != endpoints_.end()) return it->second;
    const std::string& host = hosts_[static_cast<size_t>(node)];
    if (interrupted_) throw LaunchError(fmt::format("pdsh to {}: cancelled", host));
    if (ended_)
      throw LaunchError(fmt::format("pdsh to {}: pdsh ended ({}) before the agent there started (is dsrun installed "
                                    "at that path there? see --remote_dsrun)", host, describe_exit(code_, signal_)));
    throw LaunchError(fmt::format("pdsh to {}: no agent started within {:.0f} s", host,
                                  std::chrono::duration<double>(deadline - started_).count()));
  }

  void interrupt() {
    {
      std::lock_guard lock(mutex_);
      interrupted_ = true;
    }
    changed_.notify_all();
  }

 private:
  // The node a pdsh output prefix names (pdsh prints hosts without user@); -1 if none.
  int node_of(std::string_view host) const {
    for (size_t i = 0; i < hosts_.size(); ++i)
      if (bare_host(hosts_[i]) == host) return static_cast<int>(i);
    return -1;
  }

  void on_line(bool is_stderr, std::string_view line) {
    std::string_view text = line;
    if (text.rfind("pdsh@", 0) == 0 && text.find(": ") != std::string_view::npos) text.remove_prefix(text.find(": ") + 2);
    int node = -1;
    if (size_t colon = text.find(": "); colon != std::string_view::npos && (node = node_of(text.substr(0, colon))) >= 0)
      text.remove_prefix(colon + 2);
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
    if (node < 0) return events_.post(AgentDiagnostic{0, fmt::format("pdsh: {}", line)});
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

  std::vector<std::string> hosts_;
  EventQueue& events_;
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

class PdshLink : public AgentLink {
 public:
  PdshLink(int node, const std::string& host, std::shared_ptr<PdshFanout> fanout, int timeout_s, EventQueue& events)
      : AgentLink(node, host, events), fanout_(std::move(fanout)), timeout_s_(timeout_s) {}
  ~PdshLink() override {
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
      throw LaunchError(fmt::format("pdsh to {}: cannot resolve '{}': {}", host_, host, ::gai_strerror(rc)));
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
      throw LaunchError(fmt::format("pdsh to {}: cannot connect to its agent on port {}: {} (the launcher must reach "
                                    "the hosts on ephemeral TCP ports)", host_, e.port, error));
    if (!write_all(sock_, e.key + "\n")) throw LaunchError(fmt::format("pdsh to {}: the agent's connection broke", host_));
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
  std::shared_ptr<PdshFanout> fanout_;
  const int timeout_s_;
  int sock_ = -1;
};

}  // namespace

void check_pdsh_installed() {
  if (pdsh_path().empty())
    throw LaunchError(fmt::format("--launcher pdsh: pdsh is not installed (not found in PATH={}); install it "
                                  "(Debian: apt install pdsh) or use --launcher ssh", std::getenv("PATH") ? std::getenv("PATH") : ""));
}

std::vector<std::unique_ptr<AgentLink>> make_pdsh_links(const std::vector<std::string>& hosts,
                                                        const LaunchOptions& options, EventQueue& events) {
  auto fanout = std::make_shared<PdshFanout>(hosts, options, events);
  std::vector<std::unique_ptr<AgentLink>> links;
  for (size_t i = 0; i < hosts.size(); ++i)
    links.push_back(std::make_unique<PdshLink>(static_cast<int>(i), hosts[i], fanout, options.ssh_timeout_s, events));
  return links;
}

}  // namespace dsrun
