// Process and file-descriptor helpers shared by the launcher and the node agent:
// exit-status wording and shell codes, full writes, PATH lookup, physical-core discovery.
#pragma once
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

}  // namespace dsrun
