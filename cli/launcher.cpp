// Runs a planned job: one agent link per host, all connected before any rank starts; then one
// event loop that relays output and, on the first failure or signal, stops every host at once.
// With --max_restarts, a failed attempt (a rank failed, or an agent was lost) that has been torn
// down completely is followed by a new attempt of the same plan: new agents, a new DS_JOB_TOKEN.
// The watchdog: agents relay their ranks' heartbeats once a second; a rank (or an agent) silent for
// --comm_timeout seconds stops the job, naming it and what the other ranks were waiting in.
#include "launcher.h"

#include <signal.h>
#include <sys/random.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "agent_link.h"
#include "errors.h"
#include "fanout_tools.h"
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

// How one attempt ended.
struct Outcome {
  int status = 0;
  bool restartable = false;  // a rank failed or an agent was lost, no signal came, every host confirmed its end
  std::string cause;         // "rank 1 on node-a killed by SIGKILL"
};

struct NodeState {
  bool ready = false;
  bool done = false;  // the agent said Done: nothing of the job is left on the host
  bool closed = false;
  bool dropped = false;  // its link was closed for want of an answer (drop_silent_hosts)
  std::string peer;
  Clock::time_point last_heard;  // the agent's last message, once its plan was sent
};

// A rank's last heartbeat as its agent relayed it.
struct RankWatch {
  int node = 0;
  Clock::time_point silent_since;  // when its last heartbeat reached the agent (launcher clock)
  std::string activity;            // what it was waiting in ("" = computing)
  int activity_ms = 0;
};

// A rank whose heartbeats were this long overdue when another rank failed is named as the cause.
constexpr auto kStallEvidence = std::chrono::seconds(3);
constexpr int kStallStatus = 124;  // as timeout(1)

// One attempt at running the plan. `events` outlives it (the signal thread posts there), and
// holds nothing of this attempt once run() returns.
class Job {
 public:
  Job(JobPlan& plan, const LaunchOptions& o, Console& console, EventQueue& events, int restarts)
      : plan_(plan), options_(o), console_(console), events_(events), nodes_(plan_.nodes.size()),
        restarts_(restarts) {}
  Outcome run();

 private:
  bool connect_all();
  void send_plans();
  void handle(const Event& e);
  // Records the first failure (later ones are only printed): `cause` (what went wrong, also the
  // restart line's text) then `action` (what dsrun does about it). `restartable` failures may
  // start the job again.
  void fail(int status, const std::string& cause, bool restartable, std::string_view action = "");
  void stop_all(int signal, int grace_ms);
  void on_progress(int node, const protocol::Progress& p);
  // Stops the job if a rank or an agent has been silent for the comm timeout.
  void check_watchdog();
  // The rank silent for at least `threshold`, longest first; -1 if none.
  int silent_rank(Clock::duration threshold, int except) const;
  // The host whose agent has been unheard for at least `threshold`, longest first; -1 if none.
  int silent_node(Clock::duration threshold) const;
  std::string stall_message(int rank, int gave_up_rank, const std::string& gave_up_how) const;
  std::string agent_silence_message(int node) const;
  // "; rank 0 was waiting in allreduce of 5514 F32": the ranks but `skip_rank` and those on `skip_node`.
  std::string others_waiting(int skip_rank, int skip_node) const;
  // While stopping: once every host that still talks has confirmed its end, a host whose agent is
  // silent (cut off, frozen) cannot confirm; its link is dropped now instead of at force_close_at_.
  void drop_silent_hosts();
  bool all_closed() const;
  const std::string& host(int node) const { return plan_.nodes[node].host; }

  JobPlan& plan_;
  const LaunchOptions& options_;
  Console& console_;
  EventQueue& events_;
  std::vector<std::unique_ptr<AgentLink>> links_;
  std::vector<NodeState> nodes_;
  const int restarts_;         // attempts before this one
  std::optional<int> status_;  // set by the first failure or signal; 0 stays "not set"
  bool restartable_ = false;   // the first failure may be retried
  bool interrupted_ = false;   // a signal arrived
  bool unconfirmed_ = false;   // a host never said its ranks were gone
  std::string cause_;
  bool stopping_ = false;
  int signals_seen_ = 0;
  int started_ = 0;
  std::optional<Clock::time_point> force_close_at_;
  std::map<int, RankWatch> watch_;  // ranks that send heartbeats, while running
  Clock::time_point next_watch_ = Clock::now();
  Clock::time_point start_time_ = Clock::now();
};

void Job::fail(int status, const std::string& cause, bool restartable, std::string_view action) {
  const std::string message = cause + std::string(action);
  if (status_) return console_.warn(message);
  status_ = status;
  restartable_ = restartable;
  cause_ = cause;
  if (restartable && restarts_ < plan_.max_restarts)
    console_.warn(message);  // not the job's end: a restart follows once every host is clean
  else if (restartable && plan_.max_restarts > 0)
    console_.error(fmt::format("{} (no restarts left: {} of {} used)", message, restarts_, plan_.max_restarts));
  else
    console_.error(message);
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

void Job::on_progress(int node, const protocol::Progress& p) {
  const auto now = Clock::now();
  for (const auto& r : p.ranks) {
    RankWatch& w = watch_[r.rank];
    w.node = node;
    w.silent_since = now - std::chrono::milliseconds(r.silent_ms);
    w.activity = r.activity;
    w.activity_ms = r.activity_ms;
  }
}

int Job::silent_rank(Clock::duration threshold, int except) const {
  const auto now = Clock::now();
  int found = -1;
  Clock::time_point oldest = now - threshold;
  for (const auto& [rank, w] : watch_)
    if (rank != except && !nodes_[w.node].closed && w.silent_since <= oldest) {
      oldest = w.silent_since;
      found = rank;
    }
  return found;
}

int Job::silent_node(Clock::duration threshold) const {
  const auto now = Clock::now();
  int found = -1;
  Clock::time_point oldest = now - threshold;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (!nodes_[i].closed && nodes_[i].last_heard <= oldest) {
      oldest = nodes_[i].last_heard;
      found = static_cast<int>(i);
    }
  return found;
}

std::string Job::agent_silence_message(int node) const {
  return fmt::format("{}: no word from its agent for {:.0f} s (host or network down?)", host(node),
                     std::chrono::duration<double>(Clock::now() - nodes_[node].last_heard).count());
}

std::string Job::stall_message(int rank, int gave_up_rank, const std::string& gave_up_how) const {
  const RankWatch& stalled = watch_.at(rank);
  const double silent_s = std::chrono::duration<double>(Clock::now() - stalled.silent_since).count();
  std::string text = fmt::format("rank {} on {} made no progress for {:.0f} s", rank, host(stalled.node), silent_s);
  if (!stalled.activity.empty()) text += fmt::format(" (it was in {})", stalled.activity);
  text += others_waiting(rank, -1);
  if (gave_up_rank >= 0) text += fmt::format(" (rank {} gave up: it {})", gave_up_rank, gave_up_how);
  return text;
}

std::string Job::others_waiting(int skip_rank, int skip_node) const {
  std::string text;
  std::map<std::string, std::vector<int>> waiting;  // activity -> ranks
  for (const auto& [r, w] : watch_)
    if (r != skip_rank && w.node != skip_node && !w.activity.empty()) waiting[w.activity].push_back(r);
  for (const auto& [what, ranks] : waiting) {
    std::string who;
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) who += (i ? ", " : "") + std::to_string(ranks[i]);
    if (ranks.size() > 8) who += fmt::format(" and {} more", ranks.size() - 8);
    text += fmt::format("; rank{} {} {} waiting in {}", ranks.size() > 1 ? "s" : "", who,
                        ranks.size() > 1 ? "were" : "was", what);
  }
  if (waiting.empty()) text += "; no other rank was waiting in a collective";
  return text;
}

void Job::drop_silent_hosts() {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (!nodes_[i].closed && Clock::now() - nodes_[i].last_heard < kStallEvidence) return;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].closed || nodes_[i].dropped) continue;
    nodes_[i].dropped = true;
    console_.warn(fmt::format("{}: dropping its connection: no word from its agent for {:.0f} s, so it cannot "
                              "confirm that its ranks ended", host(i),
                              std::chrono::duration<double>(Clock::now() - nodes_[i].last_heard).count()));
    unconfirmed_ = true;
    links_[i]->close();
  }
}

void Job::check_watchdog() {
  next_watch_ = Clock::now() + std::chrono::milliseconds(250);
  if (stopping_) return;
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan_.comm_timeout_s));
  const auto now = Clock::now();
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (!nodes_[i].closed && now - nodes_[i].last_heard > limit + std::chrono::seconds(1)) {
      fail(kStallStatus, agent_silence_message(static_cast<int>(i)), true, "; stopping all ranks");
      return stop_all(SIGTERM, static_cast<int>(options_.kill_grace_s * 1000));
    }
  const int rank = silent_rank(limit, -1);
  if (rank < 0) return;
  fail(kStallStatus, stall_message(rank, -1, ""), true, "; stopping all ranks");
  stop_all(SIGTERM, static_cast<int>(options_.kill_grace_s * 1000));
}

void Job::handle(const Event& e) {
  const int grace_ms = static_cast<int>(options_.kill_grace_s * 1000);
  if (auto* m = std::get_if<AgentMessage>(&e)) {
    const std::string& where = host(m->node);
    nodes_[m->node].last_heard = Clock::now();
    if (auto* out = std::get_if<proto::Output>(&m->message)) {
      console_.rank_line(where, out->rank, out->stream, out->line);
    } else if (std::get_if<proto::Started>(&m->message)) {
      if (++started_ == plan_.world_size)
        console_.info(fmt::format("all {} ranks running ({:.0f} ms after start)", plan_.world_size,
                                  std::chrono::duration<double, std::milli>(Clock::now() - start_time_).count()));
    } else if (auto* x = std::get_if<proto::Exited>(&m->message)) {
      console_.rank_exit(where, x->rank, x->code, x->signal);
      if ((x->code != 0 || x->signal != 0) && !stopping_) {
        // A rank that gave up waiting (its collective timed out) is not the cause when another has
        // been silent: name the silent one, or the host whose agent is silent (a cut link, a dead
        // host: its ranks are unheard too, and may never have reported at all).
        const int quiet_node = silent_node(kStallEvidence);
        const int silent = silent_rank(kStallEvidence, x->rank);
        if (quiet_node >= 0)
          fail(kStallStatus, fmt::format("{}{} (rank {} gave up: it {})", agent_silence_message(quiet_node),
                                         others_waiting(-1, quiet_node), x->rank, describe_exit(x->code, x->signal)),
               true, "; stopping all ranks");
        else if (silent >= 0)
          fail(kStallStatus, stall_message(silent, x->rank, describe_exit(x->code, x->signal)), true,
               "; stopping all ranks");
        else
          fail(shell_status(x->code, x->signal), fmt::format("rank {} on {} {}", x->rank, where,
                                                             describe_exit(x->code, x->signal)),
               true, "; stopping all ranks");
        stop_all(SIGTERM, grace_ms);
      }
      watch_.erase(x->rank);  // after the message: a rank that gave up waiting is named with what it waited in
    } else if (auto* p = std::get_if<proto::Progress>(&m->message)) {
      on_progress(m->node, *p);
    } else if (auto* err = std::get_if<proto::Error>(&m->message)) {
      fail(1, err->message, false);  // the agent could not start its ranks: the same plan would fail again
      if (!stopping_) stop_all(SIGTERM, grace_ms);
    } else if (std::get_if<proto::Done>(&m->message)) {
      nodes_[m->node].done = true;
    }
  } else if (auto* d = std::get_if<AgentDiagnostic>(&e)) {
    console_.warn(d->node < 0 ? d->line : fmt::format("{}: {}", host(d->node), d->line));
  } else if (auto* c = std::get_if<LinkClosed>(&e)) {
    nodes_[c->node].closed = true;
    if (!nodes_[c->node].done) {
      std::string why = c->error.empty()
                            ? fmt::format("{}: the connection to its agent ended before its ranks were done", host(c->node))
                            : c->error;
      if (!stopping_) {
        fail(1, why, true, "; stopping all ranks");
        stop_all(SIGTERM, grace_ms);
      } else if (!c->error.empty()) {
        console_.warn(why);
      }
    }
  } else if (auto* s = std::get_if<SignalReceived>(&e)) {
    interrupted_ = true;
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
  const bool fanout = is_fanout_launcher(plan_.transport);
  if (fanout) {
    std::vector<std::string> hosts;
    for (const auto& node : plan_.nodes) hosts.push_back(node.host);
    links_ = make_fanout_links(plan_.transport, hosts, options_, events_);
  }
  for (size_t i = 0; !fanout && i < plan_.nodes.size(); ++i) {
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
                                                  2 * options_.ssh_timeout_s + 5), false);
      return false;
    }
    if (auto* r = std::get_if<LinkReady>(&*e)) {
      nodes_[r->node].ready = true;
      nodes_[r->node].peer = r->peer_address;
      ++ready;
    } else if (auto* c = std::get_if<LinkClosed>(&*e)) {
      nodes_[c->node].closed = true;
      fail(1, c->error, false);
      return false;
    } else if (auto* d = std::get_if<AgentDiagnostic>(&*e)) {
      console_.warn(d->node < 0 ? d->line : fmt::format("{}: {}", host(d->node), d->line));
    } else if (auto* s = std::get_if<SignalReceived>(&*e)) {
      status_ = shell_status(0, s->signal);
      interrupted_ = true;
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
    console_.info(fmt::format("MASTER_ADDR={} (the address of {} as reached over {}; override with --master_addr)",
                              addr, host(0), plan_.transport == "ssh" ? "SSH" : "TCP from here"));
  }
  const std::string token = plan_.token ? *plan_.token : random_hex(16);
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
    p.cores = options_.bind_core_ids;
    p.pass_local_rank = options_.pass_local_rank;
    links_[i]->send(p);
    nodes_[i].last_heard = Clock::now();
  }
}

Outcome Job::run() {
  if (connect_all()) {
    send_plans();
    while (!all_closed()) {
      if (!stopping_ && Clock::now() >= next_watch_) check_watchdog();
      if (stopping_ && Clock::now() >= next_watch_) {
        next_watch_ = Clock::now() + std::chrono::milliseconds(250);
        drop_silent_hosts();
      }
      auto until = force_close_at_.value_or(Clock::now() + std::chrono::hours(24 * 365));
      if (next_watch_ < until) until = next_watch_;
      auto e = events_.wait_until(until);
      if (e) {
        handle(*e);
        continue;
      }
      if (!force_close_at_ || Clock::now() < *force_close_at_) continue;  // a watchdog tick
      console_.warn("some hosts did not confirm their ranks ended; dropping their connections");
      unconfirmed_ = true;
      for (size_t i = 0; i < links_.size(); ++i)
        if (!nodes_[i].closed) links_[i]->close();
      force_close_at_.reset();
    }
  }
  for (auto& link : links_) link->close();
  for (auto& link : links_) link->join();
  // Every link thread has ended: what is left in the queue is stale output of this attempt, or a
  // signal that arrived while it ended (which stops the job: no restart).
  while (auto e = events_.wait_until(Clock::now()))
    if (std::holds_alternative<SignalReceived>(*e)) interrupted_ = true;
  Outcome out;
  out.status = status_.value_or(0);
  out.restartable = restartable_ && !interrupted_ && !unconfirmed_ && out.status != 0;
  out.cause = cause_;
  if (restartable_ && unconfirmed_ && !interrupted_ && restarts_ < plan_.max_restarts)
    console_.warn("not restarting: a host did not confirm that its ranks ended");
  return out;
}

}  // namespace

int run_job(JobPlan plan, const LaunchOptions& options, Console& console) {
  if (plan.nodes.empty()) throw InputError("selection is empty: nothing to run");
  EventQueue events;
  SignalWatcher signals(events);  // before any link thread, which inherits the blocked signals
  for (int restarts = 0;; ++restarts) {
    set_restart_count(plan, restarts);
    Outcome out = Job(plan, options, console, events, restarts).run();
    if (!out.restartable || restarts >= plan.max_restarts) {
      console.finished(out.status);
      return out.status;
    }
    console.restart(restarts + 1, plan.max_restarts, out.cause);
  }
}

}  // namespace dsrun
