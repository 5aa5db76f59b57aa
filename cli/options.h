// Command-line options of `dsrun [options] PROGRAM [ARGS...]`, with DeepSpeed's flag names.
#pragma once
#include <string>
#include <vector>

namespace dsrun {

struct LaunchOptions {
  std::string hostfile = "/job/hostfile";
  bool hostfile_given = false;  // -H was on the command line (a missing file is then an error)
  std::string include, exclude;
  int num_nodes = -1, num_gpus = -1;  // -1 = not given
  std::string master_addr;            // empty = detect
  int master_port = 29500;
  std::string launcher;               // empty = choose (local or ssh)
  std::string launcher_args;          // ssh: OpenSSH-style options (-p, -l, -i, -o Key=Value)
  int ssh_port = 0;                   // 0 = from ~/.ssh/config or 22
  std::string ssh_identity, ssh_known_hosts;
  bool ssh_accept_new = false;
  int ssh_timeout_s = 10;
  std::string remote_dsrun;           // empty = this dsrun's absolute path
  std::string log_dir;                // --enable_each_rank_log; "" or "None" = off
  bool bind_cores_to_rank = false;
  std::string bind_core_list;
  std::vector<int> bind_core_ids;     // --bind_core_list parsed by parse_options; empty = the host's physical cores
  std::vector<std::string> exports;   // --export NAME=VALUE
  bool dry_run = false;
  std::string format = "text";        // text | json
  bool quiet = false, no_prefix = false;
  bool pass_local_rank = false;
  double kill_grace_s = 5.0;
  double comm_timeout_s = 300;        // --comm_timeout; else DS_COMM_TIMEOUT (s) or DEEPSPEED_TIMEOUT (min) of dsrun's environment
  int max_restarts = 0;               // start the whole job again after a failure, up to N times
  bool no_ssh = false;                // --no_ssh: run only node `node_rank` of the plan, here
  int node_rank = -1;                 // --node_rank; -1 = not given
  std::vector<std::string> program;   // PROGRAM and its arguments, untouched
};

// Parses argv. Returns nullopt-like `false` after printing --help/--version (exit 0);
// throws InputError on a usage error.
bool parse_options(int argc, char** argv, LaunchOptions& options);

}  // namespace dsrun
