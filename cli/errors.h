// Exception types of the launcher. Messages start with where the bad value came from
// (`hostfile:3: …`, `--include: …`) and carry the value itself; main() prints them as
// `dsrun: error: <message>` and exits with the status below.
#pragma once
#include <stdexcept>

namespace dsrun {

// Bad input from the user: flags, hostfile, .deepspeed_env, selection. Exit status 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The job could not be started or run: SSH, spawning, the agent protocol. Exit status 1.
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace dsrun
