// Process and file-descriptor helpers (see process.h).
#include "process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "errors.h"

namespace dsrun {

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

int shell_status(int code, int signal) { return signal ? 128 + signal : code; }

std::string describe_exit(int code, int signal) {
  return signal ? fmt::format("killed by {}", signal_name(signal)) : fmt::format("exited with code {}", code);
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

const std::string* find_env(const std::vector<EnvVar>& env, std::string_view name) {
  for (const auto& v : env)
    if (v.name == name) return &v.value;
  return nullptr;
}

std::string find_program(const std::string& program, const std::string& path_var) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return executable(program) ? program : "";
  size_t start = 0;
  while (start <= path_var.size()) {
    size_t end = path_var.find(':', start);
    if (end == std::string::npos) end = path_var.size();
    std::string dir = path_var.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (executable(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

std::vector<int> physical_cores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return {0};
  std::vector<int> cores;
  std::set<std::string> seen_siblings;  // one entry per physical core
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    std::ifstream f(fmt::format("/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list", cpu));
    std::string siblings;
    if (!(f >> siblings)) siblings = std::to_string(cpu);
    if (seen_siblings.insert(siblings).second) cores.push_back(cpu);
  }
  return cores;
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "dsrun";
  return std::string(buf, static_cast<size_t>(n));
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(fmt::format("pipe: {}", std::strerror(errno)));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

namespace {
std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}
}  // namespace

Spawned spawn_process(const std::string& program, const std::vector<std::string>& argv_in,
                      const std::vector<std::string>& env_in, const std::vector<int>& cores, int inherit_fd) {
  std::vector<std::string> argv = argv_in, env = env_in;
  std::vector<char*> c_argv = c_strings(argv), c_env = c_strings(env);
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int c : cores) CPU_SET(c, &cpu_set);

  // Owned until handed over: a failing pipe or fork closes every end made so far.
  Pipe out = make_pipe(), err = make_pipe(), exec_status = make_pipe();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw LaunchError(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // Child: async-signal-safe calls only until exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(137);  // the parent died before the line above took effect
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // dup2's copy is inherited, not this
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(out.write.get(), STDOUT_FILENO);
    ::dup2(err.write.get(), STDERR_FILENO);
    if (!cores.empty()) ::sched_setaffinity(0, sizeof(cpu_set), &cpu_set);
    if (inherit_fd >= 0) ::fcntl(inherit_fd, F_SETFD, 0);  // the child's copy only: clears close-on-exec
    ::execve(program.c_str(), c_argv.data(), c_env.data());
    const int e = errno;
    (void)!::write(exec_status.write.get(), &e, sizeof(e));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so kill(-pid) works even before the child ran
  out.write.reset();
  err.write.reset();
  exec_status.write.reset();
  Spawned s;
  s.pid = pid;
  ssize_t n;
  do n = ::read(exec_status.read.get(), &s.exec_errno, sizeof(s.exec_errno));
  while (n < 0 && errno == EINTR);
  if (n <= 0) s.exec_errno = 0;  // end of file: the exec closed the pipe's write end
  s.out = std::move(out.read);
  s.err = std::move(err.read);
  return s;
}

}  // namespace dsrun
