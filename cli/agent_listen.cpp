// `dsrun agent --listen --node N`: the agent as the fanout transports (pdsh, mpirun, mpiexec, srun)
// start it. They do not carry stdin to remote commands, so the agent cannot read its plan there.
// Instead it listens on an ephemeral TCP port, prints "#dsrun-agent-listening N PORT KEY" on stdout
// (the tool relays that to dsrun, the only reader), and accepts the one connection that presents
// KEY. KEY is made here and travels only in the tool's output channel, never on a command line. That connection then
// becomes the agent's stdin and stdout, and the agent runs exactly as over the ssh transport.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "agent.h"
#include "process.h"

namespace dsrun {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWaitForLauncher = std::chrono::seconds(60);
constexpr int kMaxWrongKeys = 16;

int listen_any() {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 16) == 0) return fd;
    ::close(fd);
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) return -1;
  return fd;
}

int port_of(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

// Reads one '\n'-terminated line of at most 128 bytes before `deadline`; "" on any failure.
std::string read_key_line(int fd, Clock::time_point deadline) {
  std::string line;
  while (line.size() < 128) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return "";
    char c;
    if (::read(fd, &c, 1) != 1) return "";
    if (c == '\n') return line;
    line.push_back(c);
  }
  return "";
}

// The tools end a job by killing what they started, process group and all, and with SIGKILL when
// their own parent (dsrun) died: hydra's and OpenMPI's daemons do so the moment mpiexec or mpirun is
// gone. An agent killed so could not stop its ranks' process groups (a rank's own children would be
// left running), so the agent proper runs in a session of its own, and the process the tool started
// only waits for it, passing on SIGTERM, SIGINT and SIGHUP, and exits with its status. If that
// process is SIGKILLed, the agent lives on until its control connection closes, then stops its
// ranks within the grace period as always. Returns -1 in the agent (to go on), the status in the
// process the tool started.
int detach_from_tool() {
  sigset_t waited, old;
  sigemptyset(&waited);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&waited, s);
  ::sigprocmask(SIG_BLOCK, &waited, &old);
  const pid_t agent = ::fork();
  if (agent < 0) {  // no detaching: the agent runs in this process, as with the ssh transport
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return -1;
  }
  if (agent == 0) {
    ::setsid();
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return -1;
  }
  for (;;) {
    siginfo_t info{};
    if (::sigwaitinfo(&waited, &info) < 0) continue;
    if (info.si_signo != SIGCHLD) {
      ::kill(agent, info.si_signo);
      continue;
    }
    int status = 0;
    if (::waitpid(agent, &status, WNOHANG) == agent)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
}

bool same_key(const std::string& given, const std::string& expected) {  // constant time
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ expected[i]);
  return diff == 0;
}

}  // namespace

int run_listening_agent(int node) {
  if (const int status = detach_from_tool(); status >= 0) return status;
  unsigned char raw[16];
  if (::getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) {
    std::fprintf(stderr, "dsrun agent: getrandom failed\n");
    return 1;
  }
  std::string key;
  for (unsigned char c : raw) key += fmt::format("{:02x}", c);
  const int listener = listen_any();
  if (listener < 0) {
    std::fprintf(stderr, "dsrun agent: cannot listen on a TCP port: %s\n", std::strerror(errno));
    return 1;
  }
  if (!write_all(STDOUT_FILENO, fmt::format("#dsrun-agent-listening {} {} {}\n", node, port_of(listener), key))) return 1;
  const auto deadline = Clock::now() + kWaitForLauncher;
  for (int wrong = 0; wrong < kMaxWrongKeys;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{listener, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    if (!same_key(read_key_line(conn, Clock::now() + std::chrono::seconds(5)), key)) {
      ::close(conn);
      ++wrong;
      continue;
    }
    ::close(listener);
    // The connection is the control channel: the agent reads fd 0 and writes fd 1.
    if (::dup2(conn, STDIN_FILENO) < 0 || ::dup2(conn, STDOUT_FILENO) < 0) return 1;
    ::close(conn);
    return run_agent();
  }
  std::fprintf(stderr, "dsrun agent: dsrun did not connect within %lld s\n",
               static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(kWaitForLauncher).count()));
  return 1;
}

// The variables by which the tools tell a process its place in their job: they describe the agent,
// not its ranks (which get RANK, LOCAL_RANK, WORLD_SIZE...), so the ranks do not inherit them.
constexpr const char* kToolRankVariables[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT",
    "PMI_ID", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_TASK_PID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};

int run_listening_agent_from_env(const char* variable) {
  const char* value = std::getenv(variable);
  char* end = nullptr;
  const long node = value ? std::strtol(value, &end, 10) : -1;
  if (!value || *value == '\0' || *end != '\0' || node < 0 || node > 1 << 20) {
    std::fprintf(stderr, "dsrun agent: %s is %s%s%s, not this node's index (was the agent started by the tool?)\n",
                 variable, value ? "'" : "unset", value ? value : "", value ? "'" : "");
    return 1;
  }
  for (const char* name : kToolRankVariables) ::unsetenv(name);
  return run_listening_agent(static_cast<int>(node));
}

}  // namespace dsrun
