// Process and file-descriptor helpers (see process.h).
#include "process.h"

#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>
#include <set>

#include <fmt/format.h>


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

}  // namespace dsrun
