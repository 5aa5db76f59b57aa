// cli/process: spawn_process (what the node agent starts each rank with) runs a program with its
// output in pipes, reports a failed exec, and leaves no descriptor open when a pipe or fork fails:
// descriptors run out under a lowered RLIMIT_NOFILE, processes under RLIMIT_NPROC 0 (in a child
// that is not root, since root ignores that limit). The program inherits nothing but 0-2.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "errors.h"
#include "process.h"

using namespace dsrun;

namespace {

// This process's open descriptors, ascending (without the one the listing itself uses).
std::vector<int> open_fds() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::stoi(e->d_name);
    if (fd != ::dirfd(dir)) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) text.append(buf, static_cast<size_t>(n));
  return text;
}

int exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Lowers the soft RLIMIT_NOFILE so that exactly `free` more descriptors can be opened; restores it.
class FdLimit {
 public:
  explicit FdLimit(int free) {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    const std::vector<int> open = open_fds();
    rlim_t limit = 0;  // descriptors below `limit` that are not open: exactly `free`
    for (int available = 0;; ++limit) {
      const bool taken = std::binary_search(open.begin(), open.end(), static_cast<int>(limit));
      if (!taken && available == free) break;
      if (!taken) ++available;
    }
    rlimit lowered = saved_;
    lowered.rlim_cur = limit;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  }
  ~FdLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

Spawned spawn_sh(const std::string& script) {
  return spawn_process("/bin/sh", {"sh", "-c", script}, {"WHO=rank"}, {});
}

}  // namespace

TEST_CASE("spawn_process: runs the program with its stdout and stderr in pipes") {
  Spawned s = spawn_sh("echo out $WHO; echo err >&2; exit 3");
  CHECK(s.exec_errno == 0);
  CHECK(::getpgid(s.pid) == s.pid);  // its own process group
  CHECK(read_all(s.out.get()) == "out rank\n");
  CHECK(read_all(s.err.get()) == "err\n");
  CHECK(exit_code(s.pid) == 3);
}

TEST_CASE("spawn_process: a program that cannot be executed is reported with its errno") {
  Spawned s = spawn_process("/nonexistent/program", {"program"}, {}, {});
  CHECK(s.exec_errno == ENOENT);
  CHECK(exit_code(s.pid) == 127);
}

TEST_CASE("spawn_process: the program inherits no descriptor of the spawner beyond stdin stdout and stderr") {
  // Descriptors of this process without close-on-exec are inherited by design; anything else
  // the program holds open on /dev/null besides its stdin was leaked by spawn_process.
  int inherited_devnull = 0;
  for (int fd : open_fds()) {
    char target[64] = {};
    if (fd > 2 && !(::fcntl(fd, F_GETFD) & FD_CLOEXEC) &&
        ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof(target) - 1) > 0 &&
        std::string(target) == "/dev/null")
      ++inherited_devnull;
  }
  Spawned s = spawn_sh("for f in /proc/$$/fd/*; do readlink \"$f\" || :; done");  // the glob's own fd is gone
  const std::string links = read_all(s.out.get());
  CHECK(exit_code(s.pid) == 0);
  int devnull = 0;
  for (size_t at = 0; (at = links.find("/dev/null\n", at)) != std::string::npos; at += 10) ++devnull;
  CAPTURE(links);
  CHECK(devnull == 1 + inherited_devnull);  // its stdin
}

TEST_CASE("spawn_process: inherit_fd is passed on under its own number and stays close-on-exec here") {
  Pipe beat = make_pipe();  // as the agent's heartbeat pipe
  const int fd = beat.write.get();
  Spawned s = spawn_process("/bin/sh", {"sh", "-c", "echo beat >&" + std::to_string(fd)}, {}, {}, fd);
  CHECK(exit_code(s.pid) == 0);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);  // only the child's copy lost the flag
  Spawned other = spawn_sh("echo x >&" + std::to_string(fd) + " 2>/dev/null || echo closed");  // not asked for
  CHECK(read_all(other.out.get()) == "closed\n");
  CHECK(exit_code(other.pid) == 0);
  beat.write.reset();
  CHECK(read_all(beat.read.get()) == "beat\n");  // the first child's line only
}

TEST_CASE("spawn_process: leaves no descriptor open when a pipe cannot be made") {
  const std::vector<int> before = open_fds();
  for (int free = 0; free < 6; ++free) {  // the first, second or third pipe fails
    CAPTURE(free);
    {
      FdLimit limit(free);
      CHECK_THROWS_WITH_AS(spawn_sh("true"), "pipe: Too many open files", LaunchError);
    }
    CHECK(open_fds() == before);
  }
}

TEST_CASE("spawn_process: leaves no descriptor open when fork fails") {
  // In a child process: root ignores RLIMIT_NPROC, so a root child first becomes nobody.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    const rlimit none{0, 0};
    if (::setrlimit(RLIMIT_NPROC, &none) != 0) ::_exit(4);
    const std::vector<int> before = open_fds();
    try {
      spawn_sh("true");
      ::_exit(5);  // fork succeeded after all
    } catch (const LaunchError& e) {
      if (std::string(e.what()).rfind("fork: ", 0) != 0) ::_exit(6);
    }
    ::_exit(open_fds() == before ? 0 : 1);
  }
  const int code = exit_code(child);
  CAPTURE(code);  // 1: a descriptor leaked; 3/4: the test could not set up; 5: fork did not fail; 6: another error
  CHECK(code == 0);
}
