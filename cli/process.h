// Process and file-descriptor helpers shared by the launcher and the node agent:
// exit-status wording and shell codes, full writes, PATH lookup, physical-core discovery,
// owned descriptors and pipes, and starting a rank process.
#pragma once
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "env_file.h"

namespace dsrun {

// "SIGKILL" for 9; "signal 42" for a number without a name.
std::string signal_name(int signal);
// The shell's status for a process: `code`, or 128 + `signal` when it was killed.
int shell_status(int code, int signal);
// "exited with code 3" or "killed by SIGSEGV".
std::string describe_exit(int code, int signal);

// Writes all of `data` to `fd`, retrying on EINTR. Returns false on any error (EPIPE included).
bool write_all(int fd, std::string_view data);
// Sets O_NONBLOCK on `fd`.
void set_nonblocking(int fd);

// The value of `name` in `env`, or nullptr.
const std::string* find_env(const std::vector<EnvVar>& env, std::string_view name);
// Resolves `program` as execvp would, but against `path_var` (a PATH value). Returns "" when not found.
std::string find_program(const std::string& program, const std::string& path_var);

// One CPU id per physical core this process may run on (the first hyperthread of each core), ascending.
std::vector<int> physical_cores();

// Absolute path of the running executable (/proc/self/exe).
std::string self_executable();

// An owned file descriptor, closed when the owner goes (-1: none). Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() {  // the caller owns it now
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);  // closes the one held, holds `fd`

 private:
  int fd_ = -1;
};

// A pipe, both ends close-on-exec. Throws LaunchError ("pipe: <reason>").
struct Pipe {
  UniqueFd read, write;
};
Pipe make_pipe();

// A process spawn_process started: its pid (also its process-group id), the read ends of its
// stdout and stderr, and errno of a failed exec (0 when the program is running).
struct Spawned {
  pid_t pid = -1;
  UniqueFd out, err;
  int exec_errno = 0;
};

// Starts `program` (a path) with `argv` and `env` ("NAME=VALUE") in its own process group, stdin
// from /dev/null, stdout and stderr into pipes, pinned to `cores` unless empty, and SIGKILLed if
// the caller dies. Blocks until the exec succeeded or failed; a failed exec is reported in
// exec_errno (the child then exits 127, for the caller to reap). Throws LaunchError when a pipe or
// fork fails; no descriptor is left open then. `inherit_fd` (if >= 0) is the one descriptor of the
// caller the program inherits, under the same number (the rank's heartbeat pipe).
Spawned spawn_process(const std::string& program, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, const std::vector<int>& cores, int inherit_fd = -1);

}  // namespace dsrun
