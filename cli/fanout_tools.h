// The cluster tools that start every node's agent in one run: pdsh, OpenMPI's mpirun, MPICH's hydra
// (mpiexec) and Slurm's srun. Each gets one process per node running `dsrun agent --listen`, which
// prints a TCP port and a one-time key that dsrun reads from the tool's output (fanout_link.cpp).
// Here: each tool's command line, the environment it needs, and how it marks which node a line of
// its output came from.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "options.h"

namespace dsrun {

// The transports fanout_link.cpp drives (ssh and local are not among them).
bool is_fanout_launcher(const std::string& launcher);

struct FanoutCommand {
  std::string tool;               // as the user named it: "pdsh", "openmpi", "mpich", "slurm"
  std::string program;            // absolute path
  std::vector<std::string> argv;  // argv[0] first
  std::vector<std::string> env;   // NAME=VALUE, the whole environment
  std::string hostfile;           // a file the command reads (srun's SLURM_HOSTFILE); removed at the end
};

// The command that starts `remote_dsrun agent --listen` once on each of `hosts`, in that order (node
// i on hosts[i]); check_fanout_input first. Throws LaunchError when the tool is missing.
FanoutCommand fanout_command(const std::string& launcher, const std::vector<std::string>& hosts,
                             const LaunchOptions& options);

// Throws InputError for what `launcher` cannot take: a host its host lists cannot hold (and user@
// except with pdsh), an ssh option value with whitespace, --launcher_args that do not split.
void check_fanout_input(const std::string& launcher, const std::vector<std::string>& hosts,
                        const LaunchOptions& options);

// Throws LaunchError naming the tool and PATH when `launcher`'s program is not installed.
void check_fanout_tool(const std::string& launcher);

// Takes the tool's per-line prefix off `line` and returns the node it names, or -1 when the line has
// none (the tool's own messages). `hosts` are the nodes' hosts (pdsh prefixes lines with the host).
int take_node_prefix(const std::string& launcher, std::string_view& line, const std::vector<std::string>& hosts);

}  // namespace dsrun
