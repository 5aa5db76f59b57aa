// Runs a planned job: one agent link per host, all connected before any rank starts; then one
// event loop that relays output and, on the first failure or signal, stops every host at once.
#include "launcher.h"

#include <signal.h>
#include <sys/random.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "agent_link.h"
#include "core_list.h"
#include "errors.h"
#include "process.h"

namespace dsrun {
namespace {

using Clock = std::chrono::steady_clock;
namespace proto = protocol;

// Turns SIGINT/SIGTERM/SIGHUP into events. Constructed before any other thread, so every thread
// inherits the blocked mask and only this one receives them. SIGUSR2, sent by the destructor to
// this thread alone, ends it without any polling delay.
class SignalWatcher {
 public:
  explicit SignalWatcher(EventQueue& events) {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR2}) sigaddset(&set_, s);
    ::pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    thread_ = std::thread([this, &events] {
      for (;;) {
        int s = ::sigwaitinfo(&set_, nullptr);
        if (s == SIGUSR2) return;
        if (s > 0) events.post(SignalReceived{s});
      }
    });
  }
  ~SignalWatcher() {
    ::pthread_kill(thread_.native_handle(), SIGUSR2);
    thread_.join();
  }

 private:
  sigset_t set_;
  std::thread thread_;
};

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) throw LaunchError("getrandom failed");
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  return hex;
}

struct NodeState {
  bool ready = false;
  bool done = false;  // the agent said Done: nothing of the job is left on the host
  bool closed = false;
  std::string peer;
};

class Job {
 public:
  Job(JobPlan plan, const LaunchOptions& o, Console& console)
      : plan_(std::move(plan)), options_(o), console_(console), nodes_(plan_.nodes.size()) {}
  int run();

 private:
  bool connect_all();
  void send_plans();
  void handle(const Event& e);
  void fail(int status, const std::string& message);
  void stop_all(int signal, int grace_ms);
  bool all_closed() const;
  const std::string& host(int node) const { return plan_.nodes[node].host; }

  JobPlan plan_;
  const LaunchOptions& options_;
  Console& console_;
  EventQueue events_;
  std::vector<std::unique_ptr<AgentLink>> links_;
  std::vector<NodeState> nodes_;
  std::optional<int> status_;  // set by the first failure or signal; 0 stays "not set"
  bool stopping_ = false;
  int signals_seen_ = 0;
  int started_ = 0;
  std::optional<Clock::time_point> force_close_at_;
  Clock::time_point start_time_ = Clock::now();
};

void Job::fail(int status, const std::string& message) {
  if (!status_) {
    status_ = status;
    console_.error(message);
  } else {
    console_.warn(message);
  }
}

void Job::stop_all(int signal, int grace_ms) {
  stopping_ = true;
  for (size_t i = 0; i < links_.size(); ++i)
    if (!nodes_[i].closed) links_[i]->send(proto::Stop{signal, grace_ms});
  // Agents SIGKILL after grace_ms; if a host still has not reported Done well after that, drop its link.
  auto deadline = Clock::now() + std::chrono::milliseconds(grace_ms) + std::chrono::seconds(5);
  if (!force_close_at_ || deadline < *force_close_at_) force_close_at_ = deadline;
}

bool Job::all_closed() const {
  for (const auto& n : nodes_)
    if (!n.closed) return false;
  return true;
}

void Job::handle(const Event& e) {
  const int grace_ms = static_cast<int>(options_.kill_grace_s * 1000);
  if (auto* m = std::get_if<AgentMessage>(&e)) {
    const std::string& where = host(m->node);
    if (auto* out = std::get_if<proto::Output>(&m->message)) {
      console_.rank_line(where, out->rank, out->stream, out->line);
    } else if (std::get_if<proto::Started>(&m->message)) {
      if (++started_ == plan_.world_size)
        console_.info(fmt::format("all {} ranks running ({:.0f} ms after start)", plan_.world_size,
                                  std::chrono::duration<double, std::milli>(Clock::now() - start_time_).count()));
    } else if (auto* x = std::get_if<proto::Exited>(&m->message)) {
      console_.rank_exit(where, x->rank, x->code, x->signal);
      if ((x->code != 0 || x->signal != 0) && !stopping_) {
        fail(shell_status(x->code, x->signal), fmt::format("rank {} on {} {}; stopping all ranks", x->rank, where,
                                                           describe_exit(x->code, x->signal)));
        stop_all(SIGTERM, grace_ms);
      }
    } else if (auto* err = std::get_if<proto::Error>(&m->message)) {
      fail(1, err->message);
      if (!stopping_) stop_all(SIGTERM, grace_ms);
    } else if (std::get_if<proto::Done>(&m->message)) {
      nodes_[m->node].done = true;
    }
  } else if (auto* d = std::get_if<AgentDiagnostic>(&e)) {
    console_.warn(fmt::format("{}: {}", host(d->node), d->line));
  } else if (auto* c = std::get_if<LinkClosed>(&e)) {
    nodes_[c->node].closed = true;
    if (!nodes_[c->node].done) {
      std::string why = c->error.empty()
                            ? fmt::format("{}: the connection to its agent ended before its ranks were done", host(c->node))
                            : c->error;
      if (!stopping_) {
        fail(1, why);
        stop_all(SIGTERM, grace_ms);
      } else if (!c->error.empty()) {
        console_.warn(why);
      }
    }
  } else if (auto* s = std::get_if<SignalReceived>(&e)) {
    if (++signals_seen_ == 1) {
      if (!status_) status_ = shell_status(0, s->signal);
      console_.warn(fmt::format("received {}: stopping all ranks (again to kill them at once)", signal_name(s->signal)));
      stop_all(s->signal, grace_ms);
    } else {
      console_.warn(fmt::format("received {} again: killing all ranks", signal_name(s->signal)));
      stop_all(SIGKILL, 0);
    }
  }
}

bool Job::connect_all() {
  for (size_t i = 0; i < plan_.nodes.size(); ++i) {
    const std::string& h = plan_.nodes[i].host;
    links_.push_back(plan_.transport == "ssh" ? make_ssh_link(static_cast<int>(i), h, options_, events_)
                                              : make_local_link(static_cast<int>(i), h, events_));
  }
  for (auto& link : links_) link->start();
  size_t ready = 0;
  auto deadline = Clock::now() + std::chrono::seconds(2 * options_.ssh_timeout_s + 5);
  while (ready < links_.size()) {
    auto e = events_.wait_until(deadline);
    if (!e) {
      for (size_t i = 0; i < nodes_.size(); ++i)
        if (!nodes_[i].ready) fail(1, fmt::format("{}: no answer from the agent within {} s", host(i),
                                                  2 * options_.ssh_timeout_s + 5));
      return false;
    }
    if (auto* r = std::get_if<LinkReady>(&*e)) {
      nodes_[r->node].ready = true;
      nodes_[r->node].peer = r->peer_address;
      ++ready;
    } else if (auto* c = std::get_if<LinkClosed>(&*e)) {
      nodes_[c->node].closed = true;
      fail(1, c->error);
      return false;
    } else if (auto* d = std::get_if<AgentDiagnostic>(&*e)) {
      console_.warn(fmt::format("{}: {}", host(d->node), d->line));
    } else if (auto* s = std::get_if<SignalReceived>(&*e)) {
      status_ = shell_status(0, s->signal);
      console_.warn(fmt::format("received {} while connecting: nothing was started", signal_name(s->signal)));
      return false;
    }
  }
  return true;
}

void Job::send_plans() {
  if (plan_.master_addr.empty()) {
    std::string addr = nodes_[0].peer.empty() ? "127.0.0.1" : nodes_[0].peer;
    set_master_addr(plan_, addr);
    console_.info(fmt::format("MASTER_ADDR={} (the address of {} as reached over SSH; override with --master_addr)",
                              addr, host(0)));
  }
  const std::string token = random_hex(16);
  const std::string cwd = std::filesystem::current_path().string();
  const std::string log_dir = options_.log_dir.empty() ? "" : std::filesystem::absolute(options_.log_dir).string();
  for (size_t i = 0; i < plan_.nodes.size(); ++i) {
    const NodePlan& node = plan_.nodes[i];
    proto::NodePlan p;
    p.host = node.host;
    p.cwd = cwd;
    p.argv = plan_.argv;
    p.env = plan_.forwarded;
    set_env(p.env, "DS_JOB_TOKEN", token);
    for (const auto& r : node.ranks) p.ranks.push_back({r.rank, r.local_rank, r.env});
    p.log_dir = log_dir;
    p.kill_grace_ms = static_cast<int>(options_.kill_grace_s * 1000);
    p.bind_cores = options_.bind_cores_to_rank;
    if (!options_.bind_core_list.empty()) p.cores = parse_core_list(options_.bind_core_list);
    p.pass_local_rank = options_.pass_local_rank;
    links_[i]->send(p);
  }
}

int Job::run() {
  SignalWatcher signals(events_);
  if (connect_all()) {
    send_plans();
    while (!all_closed()) {
      auto e = events_.wait_until(force_close_at_.value_or(Clock::now() + std::chrono::hours(24 * 365)));
      if (e) {
        handle(*e);
        continue;
      }
      console_.warn("some hosts did not confirm their ranks ended; dropping their connections");
      for (size_t i = 0; i < links_.size(); ++i)
        if (!nodes_[i].closed) links_[i]->close();
      force_close_at_.reset();
    }
  }
  for (auto& link : links_) link->close();
  for (auto& link : links_) link->join();
  int status = status_.value_or(0);
  console_.finished(status);
  return status;
}

}  // namespace

int run_job(JobPlan plan, const LaunchOptions& options, Console& console) {
  if (plan.nodes.empty()) throw InputError("selection is empty: nothing to run");
  return Job(std::move(plan), options, console).run();
}

}  // namespace dsrun
