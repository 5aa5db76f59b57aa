// The node agent: starts the node's ranks, relays their output, heartbeats and exits, and
// guarantees that nothing it started outlives it (process groups, PR_SET_PDEATHSIG, child subreaper).
#include "agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "core_list.h"
#include "errors.h"
#include "process.h"
#include "protocol.h"

extern char** environ;

namespace dsrun {
namespace {

using Clock = std::chrono::steady_clock;
namespace proto = protocol;

constexpr size_t kMaxLineBytes = 64 * 1024;  // longer lines are relayed in pieces

// A pipe from one rank's stdout or stderr, split into lines.
struct OutputPipe {
  int fd = -1;
  int stream = 1;
  std::string pending;  // bytes after the last '\n'
};

// The read end of a rank's heartbeat pipe (DSRUN_HEARTBEAT_FD) and what it last said.
struct Heartbeat {
  int fd = -1;
  std::string pending;
  bool seen = false;  // only ranks that have beaten once are watched
  Clock::time_point last;
  std::string activity;
  int activity_ms = 0;
};

struct Rank {
  proto::RankSpec spec;
  pid_t pid = -1;  // also its process-group id
  bool running = false;
  OutputPipe out, err;
  int log_fd = -1;
  Heartbeat beat;
};

class Agent {
 public:
  int run();

 private:
  void send(const proto::Message& m);
  void on_plan(proto::NodePlan plan);
  void start_rank(Rank& rank, const std::string& program, const std::vector<std::string>& argv,
                  const std::vector<int>& cores);
  void fail(const std::string& message);
  void stop(int signal, int grace_ms);
  void kill_running(int signal);
  void reap();
  void read_pipe(Rank& rank, OutputPipe& pipe);
  void read_heartbeat(Heartbeat& beat);
  void send_progress();
  void emit_line(Rank& rank, int stream, std::string_view line);
  void finish();
  bool all_exited() const;
  int poll_timeout_ms() const;

  proto::NodePlan plan_;
  bool have_plan_ = false;
  std::vector<Rank> ranks_;
  proto::Decoder decoder_;
  bool launcher_gone_ = false;  // stdin closed or stdout broken
  bool stopping_ = false;
  std::optional<Clock::time_point> kill_deadline_;
  Clock::time_point next_progress_ = Clock::now();
  int signal_fd_ = -1;
};

void Agent::send(const proto::Message& m) {
  if (launcher_gone_) return;
  if (!write_all(STDOUT_FILENO, proto::encode(m))) {
    launcher_gone_ = true;
    stop(SIGTERM, have_plan_ ? plan_.kill_grace_ms : 0);
  }
}

// Reports a node-level problem and tears the node down.
void Agent::fail(const std::string& message) {
  send(proto::Error{fmt::format("{}: {}", plan_.host.empty() ? "agent" : plan_.host, message)});
  stop(SIGTERM, plan_.kill_grace_ms);
}

// A stopped rank (SIGSTOP, or a stalled one) acts on no signal but SIGKILL until continued, so
// every other signal is followed by SIGCONT.
void Agent::kill_running(int signal) {
  for (auto& r : ranks_)
    if (r.running) {
      ::kill(-r.pid, signal);
      if (signal != SIGKILL && signal != SIGCONT) ::kill(-r.pid, SIGCONT);
    }
}

void Agent::stop(int signal, int grace_ms) {
  if (grace_ms <= 0) {
    kill_running(SIGKILL);
    kill_deadline_.reset();
    stopping_ = true;
    return;
  }
  if (stopping_) return;  // the first stop's signal and deadline stand
  stopping_ = true;
  kill_running(signal);
  kill_deadline_ = Clock::now() + std::chrono::milliseconds(grace_ms);
}

bool Agent::all_exited() const {
  for (const auto& r : ranks_)
    if (r.running) return false;
  return true;
}

int Agent::poll_timeout_ms() const {
  Clock::time_point next = have_plan_ ? next_progress_ : Clock::time_point::max();
  if (kill_deadline_ && *kill_deadline_ < next) next = *kill_deadline_;
  if (next == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left) + 1;
}

// Keeps the last complete line: "<activity>\t<ms>".
void Agent::read_heartbeat(Heartbeat& beat) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(beat.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      ::close(beat.fd);
      beat.fd = -1;
      return;
    }
    beat.pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = beat.pending.find('\n')) != std::string::npos) {
      std::string line = beat.pending.substr(0, nl);
      beat.pending.erase(0, nl + 1);
      size_t tab = line.rfind('\t');
      beat.seen = true;
      beat.last = Clock::now();
      beat.activity = line.substr(0, tab == std::string::npos ? line.size() : tab);
      beat.activity_ms = tab == std::string::npos ? 0 : std::atoi(line.c_str() + tab + 1);
    }
    if (beat.pending.size() > 4096) beat.pending.clear();  // not our format: ignore it
  }
}

void Agent::send_progress() {
  proto::Progress p;
  const auto now = Clock::now();
  for (const auto& r : ranks_)
    if (r.running && r.beat.seen)
      p.ranks.push_back({r.spec.rank,
                         static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now - r.beat.last).count()),
                         r.beat.activity, r.beat.activity_ms});
  send(p);
  next_progress_ = now + std::chrono::seconds(1);
}

void Agent::emit_line(Rank& rank, int stream, std::string_view line) {
  if (rank.log_fd >= 0) {
    std::string text(line);
    text.push_back('\n');
    write_all(rank.log_fd, text);
  }
  send(proto::Output{rank.spec.rank, stream, std::string(line)});
}

void Agent::read_pipe(Rank& rank, OutputPipe& pipe) {
  char buf[16384];
  while (pipe.fd >= 0) {
    ssize_t n = ::read(pipe.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // EOF (or a read error, treated alike): flush the unterminated tail
      if (!pipe.pending.empty()) emit_line(rank, pipe.stream, pipe.pending);
      pipe.pending.clear();
      ::close(pipe.fd);
      pipe.fd = -1;
      return;
    }
    pipe.pending.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = pipe.pending.find('\n', start)) != std::string::npos) {
      emit_line(rank, pipe.stream, std::string_view(pipe.pending).substr(start, nl - start));
      start = nl + 1;
    }
    pipe.pending.erase(0, start);
    while (pipe.pending.size() > kMaxLineBytes) {
      emit_line(rank, pipe.stream, std::string_view(pipe.pending).substr(0, kMaxLineBytes));
      pipe.pending.erase(0, kMaxLineBytes);
    }
  }
}

void Agent::reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (auto& r : ranks_) {
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      read_pipe(r, r.out);  // relay what it wrote before its exit is reported
      read_pipe(r, r.err);
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
      int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      send(proto::Exited{r.spec.rank, code, sig});
      if ((code != 0 || sig != 0) && !stopping_) stop(SIGTERM, plan_.kill_grace_ms);
    }
    // Any other pid is a descendant reparented to us (we are a subreaper): reaped, nothing to report.
  }
}

// Kills whatever is left of each rank's process group and every process reparented to the agent,
// then reaps them, so the node holds nothing of the job when Done is sent.
void Agent::finish() {
  for (auto& r : ranks_)
    if (r.pid > 0) ::kill(-r.pid, SIGKILL);
  pid_t self = ::getpid();
  if (DIR* proc = ::opendir("/proc")) {
    while (dirent* e = ::readdir(proc)) {
      pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
      if (!f) continue;
      char buf[512];
      size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      std::fclose(f);
      buf[n] = '\0';
      const char* after_name = std::strrchr(buf, ')');  // "pid (comm) state ppid ..."
      char state;
      int ppid;
      if (after_name && std::sscanf(after_name + 1, " %c %d", &state, &ppid) == 2 && ppid == self)
        ::kill(pid, SIGKILL);
    }
    ::closedir(proc);
  }
  while (::waitpid(-1, nullptr, 0) > 0) {
  }
  for (auto& r : ranks_) {
    if (r.beat.fd >= 0) ::close(r.beat.fd);
    r.beat.fd = -1;
    for (OutputPipe* p : {&r.out, &r.err}) {
      set_nonblocking(p->fd);
      read_pipe(r, *p);
      if (p->fd >= 0) ::close(p->fd);
      p->fd = -1;
    }
    if (r.log_fd >= 0) ::close(r.log_fd);
  }
  send(proto::Done{});
}

std::vector<std::string> environment_strings(const std::vector<EnvVar>& common, const std::vector<EnvVar>& rank) {
  std::vector<EnvVar> merged;
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    merged.push_back({std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1))});
  }
  for (const auto& v : common) set_env(merged, v.name, v.value);
  for (const auto& v : rank) set_env(merged, v.name, v.value);
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& v : merged) out.push_back(v.name + "=" + v.value);
  return out;
}

void Agent::start_rank(Rank& rank, const std::string& program, const std::vector<std::string>& base_argv,
                       const std::vector<int>& cores) {
  std::vector<EnvVar> rank_env = rank.spec.env;
  if (!cores.empty()) set_env(rank_env, "OMP_NUM_THREADS", std::to_string(cores.size()));
  std::vector<std::string> argv = base_argv;
  if (plan_.pass_local_rank) argv.push_back(fmt::format("--local_rank={}", rank.spec.local_rank));
  Pipe beat = make_pipe();
  set_env(rank_env, "DSRUN_HEARTBEAT_FD", std::to_string(beat.write.get()));
  Spawned child = spawn_process(program, argv, environment_strings(plan_.env, rank_env), cores, beat.write.get());
  beat.write.reset();
  rank.beat.fd = beat.read.release();
  set_nonblocking(rank.beat.fd);
  rank.pid = child.pid;
  rank.running = true;
  rank.out = {child.out.release(), 1, {}};
  rank.err = {child.err.release(), 2, {}};
  set_nonblocking(rank.out.fd);
  set_nonblocking(rank.err.fd);
  if (child.exec_errno != 0) {
    fail(fmt::format("rank {}: cannot execute '{}': {}", rank.spec.rank, program, std::strerror(child.exec_errno)));
    return;
  }
  send(proto::Started{rank.spec.rank, child.pid});
}

void Agent::on_plan(proto::NodePlan plan) {
  plan_ = std::move(plan);
  have_plan_ = true;
  for (const auto& spec : plan_.ranks) ranks_.push_back(Rank{spec, -1, false, {}, {}, -1, {}});
  next_progress_ = Clock::now() + std::chrono::seconds(1);
  if (plan_.argv.empty()) return fail("no program to run");
  if (::chdir(plan_.cwd.c_str()) != 0)
    return fail(fmt::format("working directory '{}' is not usable on this host: {}", plan_.cwd, std::strerror(errno)));

  std::string path_var = ::getenv("PATH") ? ::getenv("PATH") : "/usr/bin:/bin";
  if (const std::string* p = find_env(plan_.env, "PATH")) path_var = *p;
  std::string program = find_program(plan_.argv[0], path_var);
  if (program.empty())
    return fail(fmt::format("cannot execute '{}': not found or not executable (PATH={})", plan_.argv[0], path_var));

  std::string stamp;
  if (!plan_.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(plan_.log_dir, ec);
    if (ec) return fail(fmt::format("cannot create log directory '{}': {}", plan_.log_dir, ec.message()));
    char buf[32];
    std::time_t now = std::time(nullptr);
    std::strftime(buf, sizeof(buf), "%Y%m%d%H%M%S", std::localtime(&now));
    stamp = buf;
  }

  std::vector<int> cores;
  if (plan_.bind_cores) cores = plan_.cores.empty() ? physical_cores() : plan_.cores;
  int local_size = static_cast<int>(ranks_.size());
  for (auto& r : ranks_) {
    if (stopping_) break;
    if (!plan_.log_dir.empty()) {
      std::string path = fmt::format("{}/{}_rank{}.log", plan_.log_dir, stamp, r.spec.rank);
      r.log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (r.log_fd < 0) return fail(fmt::format("cannot open log file '{}': {}", path, std::strerror(errno)));
    }
    std::vector<int> rank_cores;
    if (plan_.bind_cores) {
      try {
        rank_cores = cores_for_rank(cores, r.spec.local_rank, local_size);
      } catch (const InputError& e) {
        return fail(e.what());
      }
    }
    start_rank(r, program, plan_.argv, rank_cores);
  }
}

int Agent::run() {
  ::signal(SIGPIPE, SIG_IGN);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t handled;
  sigemptyset(&handled);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, nullptr);
  signal_fd_ = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);

  if (!write_all(STDOUT_FILENO, proto::kPreamble)) return 1;
  send(proto::Hello{proto::kVersion, static_cast<int>(::getpid())});
  bool stdin_open = true;
  for (;;) {
    if (have_plan_ && all_exited()) break;
    if (!have_plan_ && (launcher_gone_ || !stdin_open)) return 1;

    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, OutputPipe*>> pipes;
    std::vector<Heartbeat*> beats;
    fds.push_back({signal_fd_, POLLIN, 0});
    if (stdin_open) fds.push_back({STDIN_FILENO, POLLIN, 0});
    for (auto& r : ranks_)
      if (r.beat.fd >= 0) {
        fds.push_back({r.beat.fd, POLLIN, 0});
        beats.push_back(&r.beat);
      }
    for (auto& r : ranks_)
      for (OutputPipe* p : {&r.out, &r.err})
        if (p->fd >= 0) {
          fds.push_back({p->fd, POLLIN, 0});
          pipes.push_back({&r, p});
        }
    int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (ready < 0 && errno != EINTR) return 1;

    if (kill_deadline_ && Clock::now() >= *kill_deadline_) {
      kill_running(SIGKILL);
      kill_deadline_.reset();
    }
    size_t i = 0;
    if (fds[i++].revents) {
      signalfd_siginfo info;
      while (::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGCHLD) continue;  // reaped below
        stop(static_cast<int>(info.ssi_signo), have_plan_ ? plan_.kill_grace_ms : 0);
      }
      reap();
    }
    if (stdin_open && fds[i++].revents) {
      char buf[65536];
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
      if (n <= 0 && !(n < 0 && errno == EINTR)) {
        stdin_open = false;  // the launcher is gone: nobody may outlive it
        launcher_gone_ = true;
        stop(SIGTERM, have_plan_ ? plan_.kill_grace_ms : 0);
      } else if (n > 0) {
        decoder_.feed(buf, static_cast<size_t>(n));
        try {
          while (auto m = decoder_.next()) {
            if (auto* plan = std::get_if<proto::NodePlan>(&*m)) {
              if (!have_plan_) on_plan(std::move(*plan));
            } else if (auto* s = std::get_if<proto::Stop>(&*m)) {
              stop(s->signal, s->grace_ms);
            }
          }
        } catch (const std::exception& e) {
          send(proto::Error{fmt::format("agent: {}", e.what())});
          stop(SIGTERM, have_plan_ ? plan_.kill_grace_ms : 0);
          stdin_open = false;
        }
      }
    }
    for (size_t k = 0; k < beats.size(); ++k, ++i)
      if (fds[i].revents) read_heartbeat(*beats[k]);
    for (size_t k = 0; k < pipes.size(); ++k, ++i)
      if (fds[i].revents) read_pipe(*pipes[k].first, *pipes[k].second);
    reap();
    if (have_plan_ && Clock::now() >= next_progress_) send_progress();
  }
  finish();
  return 0;
}

}  // namespace

int run_agent() { return Agent().run(); }

}  // namespace dsrun
