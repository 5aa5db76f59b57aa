// `dsrun report` (see report.h).
#include "report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <libssh/libssh.h>
#include <nlohmann/json.hpp>

#include "process.h"

namespace dsrun {
namespace {

namespace fs = std::filesystem;

// `name` on $PATH, or "".
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    if (!dir.empty() && ::access((fs::path(dir) / name).c_str(), X_OK) == 0) return (fs::path(dir) / name).string();
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return "";
}

// dsworker beside this dsrun: the same bin/ when installed, ../worker/ in the build tree.
std::string find_dsworker(std::vector<std::string>& looked) {
  const fs::path dir = fs::path(self_executable()).parent_path();
  for (const fs::path& p : {dir / "dsworker", dir / ".." / "worker" / "dsworker"}) {
    looked.push_back(p.lexically_normal().string());
    if (::access(p.c_str(), X_OK) == 0) return p.lexically_normal().string();
  }
  return "";
}

// Runs `args` (args[0] a path, no shell) with this process's stdout and stderr; its exit status.
int run_and_wait(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "dsrun: error: report: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "dsrun: error: report: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int run_report(int argc, char** argv) {
  std::string format = "text";
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--format" && i + 1 < argc) {
      format = argv[++i];
    } else if (arg.rfind("--format=", 0) == 0) {
      format = std::string(arg.substr(9));
    } else {
      std::fprintf(stderr, "dsrun: error: report: unknown argument '%s' (usage: dsrun report [--format text|json])\n",
                   argv[i]);
      return 2;
    }
  }
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "dsrun: error: report: --format '%s' is not one of text, json\n", format.c_str());
    return 2;
  }
  nlohmann::ordered_json launcher = {{"dsrun", DSRUN_VERSION}, {"libssh", ssh_version(0)}};
  for (const char* tool : {"ssh", "pdsh", "mpirun", "mpiexec", "srun"}) {
    const std::string where = on_path(tool);
    launcher[tool] = where.empty() ? "not found on PATH" : where;
  }
  std::vector<std::string> looked;
  const std::string dsworker = find_dsworker(looked);
  if (format == "json") {
    // One JSON object: {"launcher": {...}, "runtime": <dsworker --report json>}.
    std::printf("{\"launcher\": %s, \"runtime\": ", launcher.dump().c_str());
  } else {
    std::printf("launcher\n");
    for (const auto& [name, value] : launcher.items())
      std::printf("  %s %s %s\n", name.c_str(), std::string(name.size() < 28 ? 30 - name.size() : 2, '.').c_str(),
                  value.get<std::string>().c_str());
  }
  if (dsworker.empty()) {
    std::string list;
    for (const auto& p : looked) list += (list.empty() ? "" : ", ") + p;
    if (format == "json") std::printf("null}\n");
    std::fprintf(stderr, "dsrun: error: report: dsworker not found (looked at %s)\n", list.c_str());
    return 1;
  }
  std::fflush(stdout);
  const int status = run_and_wait({dsworker, "--report", format});
  if (format == "json") std::printf("}\n");
  return status;
}

}  // namespace dsrun
