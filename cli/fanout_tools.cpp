// Each cluster tool's command line and output prefix (fanout_tools.h). Node i's agent must run on
// hosts[i]: pdsh substitutes %n, mpirun and hydra place rank i on the i-th host of their list with
// one slot each, srun does so with the arbitrary distribution over SLURM_HOSTFILE. The agents learn
// their node from the tool's rank variable (--node-env), and every line the tool relays carries the
// rank (or, for pdsh, the host), so diagnostics name their node.
#include "fanout_tools.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "allocation.h"
#include "errors.h"
#include "process.h"
#include "text.h"

extern char** environ;

namespace dsrun {
namespace {

// The programs each launcher may run, in order of preference (Debian names the MPI ones by flavour
// and points mpirun/mpiexec at one of them).
std::vector<std::string> candidates(const std::string& launcher) {
  if (launcher == "pdsh") return {"pdsh"};
  if (launcher == "openmpi") return {"mpirun.openmpi", "mpirun"};
  if (launcher == "mpich") return {"mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich"};
  return {"srun"};
}

std::string path_variable() {
  const char* path = std::getenv("PATH");
  return path ? path : "/usr/bin:/bin";
}

std::string find_tool(const std::string& launcher) {
  for (const auto& name : candidates(launcher))
    if (std::string found = find_program(name, path_variable()); !found.empty()) return found;
  return "";
}

const char* package_hint(const std::string& launcher) {
  if (launcher == "pdsh") return "Debian: apt install pdsh";
  if (launcher == "openmpi") return "Debian: apt install openmpi-bin";
  if (launcher == "mpich") return "Debian: apt install mpich";
  return "Debian: apt install slurm-client, on a machine of the Slurm cluster";
}

// The agent's argv after the program: `agent --listen --node-env VAR` for the MPI tools and srun.
std::vector<std::string> agent_argv(const LaunchOptions& o, const char* rank_variable) {
  return {o.remote_dsrun.empty() ? self_executable() : o.remote_dsrun, "agent", "--listen", "--node-env", rank_variable};
}

// The OpenSSH options that carry --ssh_port, --ssh_identity, --ssh_known_hosts, --ssh_accept_new and
// --ssh_timeout to the ssh a tool runs. The tools split them at whitespace, so no value may hold any.
std::string openssh_options(const LaunchOptions& o) {
  std::vector<std::string> args;
  auto add = [&](const std::string& flag, const std::string& value, const char* option) {
    if (value.find_first_of(kWhitespace) != std::string::npos)
      throw InputError(fmt::format("{} '{}': --launcher {} cannot pass a value with whitespace to ssh", option, value,
                                   o.launcher));
    args.push_back(flag);
    args.push_back(value);
  };
  if (o.ssh_port > 0) add("-p", std::to_string(o.ssh_port), "--ssh_port");
  if (!o.ssh_identity.empty()) add("-i", o.ssh_identity, "--ssh_identity");
  if (!o.ssh_known_hosts.empty()) add("-o", "UserKnownHostsFile=" + o.ssh_known_hosts, "--ssh_known_hosts");
  if (o.ssh_accept_new) add("-o", "StrictHostKeyChecking=accept-new", "--ssh_accept_new");
  add("-o", fmt::format("ConnectTimeout={}", o.ssh_timeout_s), "--ssh_timeout");
  add("-o", "BatchMode=yes", "");  // never prompt: there is no terminal behind the tool
  return fmt::format("{}", fmt::join(args, " "));
}

// This process's environment without the variables in `replaced`; `kept` receives their values.
std::vector<std::string> environment_without(const std::vector<std::string>& replaced, std::vector<std::string>& kept) {
  std::vector<std::string> env;
  kept.assign(replaced.size(), "");
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    bool skip = false;
    for (size_t i = 0; i < replaced.size() && !skip; ++i)
      if (entry.size() > replaced[i].size() && entry.rfind(replaced[i], 0) == 0 && entry[replaced[i].size()] == '=') {
        kept[i] = std::string(entry.substr(replaced[i].size() + 1));
        skip = true;
      }
    if (!skip) env.emplace_back(entry);
  }
  return env;
}

// MPI and Slurm take plain host names in comma lists with ':' for slots; they have no user@.
void check_plain_hosts(const std::string& launcher, const std::vector<std::string>& hosts) {
  for (const auto& h : hosts) {
    if (h.find('@') != std::string::npos)
      throw InputError(fmt::format("--launcher {}: host '{}': the user comes from the tool's own configuration (ssh's "
                                   "~/.ssh/config, Slurm's account), not from the hostfile", launcher, h));
    if (h.empty() || h[0] == '-' || h.find_first_of(",:[]") != std::string::npos ||
        h.find_first_of(kWhitespace) != std::string::npos)
      throw InputError(fmt::format("--launcher {}: host '{}' cannot be given to {} (its host lists read ',', ':', "
                                   "'[', ']' and a leading '-')", launcher, h, launcher == "slurm" ? "srun" : "mpirun"));
  }
}

FanoutCommand pdsh_command(const std::vector<std::string>& hosts, const LaunchOptions& o) {
  FanoutCommand c{"pdsh", find_tool("pdsh"), {}, {}, {}};
  const std::string remote = o.remote_dsrun.empty() ? self_executable() : o.remote_dsrun;
  c.argv = {"pdsh", "-S", "-f", "1024", "-w", fmt::format("{}", fmt::join(hosts, ","))};
  for (auto& word : split_shell_words(o.launcher_args, "--launcher_args")) c.argv.push_back(std::move(word));
  c.argv.push_back("exec " + single_quote(remote) + " agent --listen --node %n");  // pdsh: %n is the host's index
  std::vector<std::string> kept;
  c.env = environment_without({"PDSH_SSH_ARGS_APPEND", "PDSH_RCMD_TYPE"}, kept);
  c.env.push_back("PDSH_RCMD_TYPE=" + (kept[1].empty() ? std::string("ssh") : kept[1]));  // the user's choice stands
  c.env.push_back(fmt::format("PDSH_SSH_ARGS_APPEND={}{}", kept[0].empty() ? "" : kept[0] + " ", openssh_options(o)));
  return c;
}

FanoutCommand openmpi_command(const std::vector<std::string>& hosts, const LaunchOptions& o) {
  FanoutCommand c{"openmpi", find_tool("openmpi"), {}, {}, {}};
  std::vector<std::string> slots;
  for (const auto& h : hosts) slots.push_back(h + ":1");
  c.argv = {"mpirun"};
  if (::geteuid() == 0) c.argv.push_back("--allow-run-as-root");  // OpenMPI refuses root without it
  // One process per host, in the list's order; not bound to a core (its ranks get the node's cores);
  // every relayed line tagged [job,rank]<stream>:.
  for (const char* word : {"--tag-output", "--bind-to", "none", "--map-by", "slot"}) c.argv.emplace_back(word);
  c.argv.insert(c.argv.end(), {"-np", std::to_string(hosts.size()), "--host", fmt::format("{}", fmt::join(slots, ","))});
  c.argv.insert(c.argv.end(), {"--mca", "plm_rsh_args", openssh_options(o)});
  for (auto& word : split_shell_words(o.launcher_args, "--launcher_args")) c.argv.push_back(std::move(word));
  for (auto& word : agent_argv(o, "OMPI_COMM_WORLD_RANK")) c.argv.push_back(std::move(word));
  std::vector<std::string> kept;
  c.env = environment_without({}, kept);
  return c;
}

FanoutCommand mpich_command(const std::vector<std::string>& hosts, const LaunchOptions& o) {
  FanoutCommand c{"mpich", find_tool("mpich"), {}, {}, {}};
  c.argv = {"mpiexec", "-prepend-rank", "-n", std::to_string(hosts.size()), "-ppn", "1", "-hosts",
            fmt::format("{}", fmt::join(hosts, ","))};
  for (auto& word : split_shell_words(o.launcher_args, "--launcher_args")) c.argv.push_back(std::move(word));
  for (auto& word : agent_argv(o, "PMI_RANK")) c.argv.push_back(std::move(word));
  std::vector<std::string> kept;
  c.env = environment_without({"HYDRA_LAUNCHER_EXTRA_ARGS"}, kept);
  c.env.push_back(fmt::format("HYDRA_LAUNCHER_EXTRA_ARGS={}{}", kept[0].empty() ? "" : kept[0] + " ", openssh_options(o)));
  return c;
}

FanoutCommand slurm_command(const std::vector<std::string>& hosts, const LaunchOptions& o) {
  FanoutCommand c{"slurm", find_tool("slurm"), {}, {}, {}};
  // srun's arbitrary distribution puts task i on the i-th line of SLURM_HOSTFILE.
  std::string dir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string path = dir + "/dsrun-slurm-hosts-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) throw LaunchError(fmt::format("--launcher slurm: cannot create {}: {}", path, std::strerror(errno)));
  const bool written = write_all(fd, fmt::format("{}\n", fmt::join(hosts, "\n")));
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    throw LaunchError(fmt::format("--launcher slurm: cannot write {}", path));
  }
  c.hostfile = path;
  const std::string n = std::to_string(hosts.size());
  // One task per node, not bound to its cores (the agent's ranks share out the node), the whole
  // step ended when one task fails, every relayed line labelled with the task's rank.
  c.argv = {"srun", "--nodes", n, "--ntasks", n, "--distribution", "arbitrary", "--cpu-bind", "none",
            "--kill-on-bad-exit", "--label"};
  // The step's one task per node must hold the node: inside an allocation all its CPUs and memory
  // there, outside one whole nodes.
  if (const int cpus = allocation_cpus_per_node(); cpus > 0)
    c.argv.insert(c.argv.end(), {"--cpus-per-task", std::to_string(cpus), "--mem", "0"});
  else if (!std::getenv("SLURM_JOB_ID"))
    c.argv.push_back("--exclusive");
  for (auto& word : split_shell_words(o.launcher_args, "--launcher_args")) c.argv.push_back(std::move(word));
  for (auto& word : agent_argv(o, "SLURM_PROCID")) c.argv.push_back(std::move(word));
  std::vector<std::string> kept;
  c.env = environment_without({"SLURM_HOSTFILE"}, kept);
  c.env.push_back("SLURM_HOSTFILE=" + path);
  return c;
}

// Reads a non-negative decimal number at the front of `text`, advancing it; -1 if none.
int take_number(std::string_view& text) {
  int value = 0;
  size_t i = 0;
  while (i < text.size() && i < 9 && text[i] >= '0' && text[i] <= '9') value = value * 10 + (text[i++] - '0');
  if (i == 0) return -1;
  text.remove_prefix(i);
  return value;
}

bool take(std::string_view& text, std::string_view prefix) {
  if (text.rfind(prefix, 0) != 0) return false;
  text.remove_prefix(prefix.size());
  return true;
}

}  // namespace

bool is_fanout_launcher(const std::string& launcher) {
  return launcher == "pdsh" || launcher == "openmpi" || launcher == "mpich" || launcher == "slurm";
}

void check_fanout_input(const std::string& launcher, const std::vector<std::string>& hosts, const LaunchOptions& o) {
  if (launcher != "pdsh") {
    check_plain_hosts(launcher, hosts);
  } else {
    if (o.remote_dsrun.find('%') != std::string::npos)
      throw InputError(fmt::format("--remote_dsrun '{}': pdsh would read '%' as its own substitution", o.remote_dsrun));
    for (const auto& h : hosts)
      if (h.empty() || h[0] == '-' || h.find_first_of(",[]^") != std::string::npos)
        throw InputError(fmt::format("--launcher pdsh: host '{}' cannot be given to pdsh -w (its host-list syntax "
                                     "reads ',', '[', ']', '^' and a leading '-')", h));
  }
  if (launcher != "slurm") openssh_options(o);  // throws for a value ssh cannot get through the tool
  split_shell_words(o.launcher_args, "--launcher_args");
}

FanoutCommand fanout_command(const std::string& launcher, const std::vector<std::string>& hosts,
                             const LaunchOptions& options) {
  check_fanout_tool(launcher);  // the input was checked before the plan ran (main.cpp)
  if (launcher == "pdsh") return pdsh_command(hosts, options);
  if (launcher == "openmpi") return openmpi_command(hosts, options);
  if (launcher == "mpich") return mpich_command(hosts, options);
  return slurm_command(hosts, options);
}

void check_fanout_tool(const std::string& launcher) {
  if (find_tool(launcher).empty())
    throw LaunchError(fmt::format("--launcher {}: {} is not installed (not found in PATH={}); install it ({}) or use "
                                  "--launcher ssh", launcher, fmt::join(candidates(launcher), " or "), path_variable(),
                                  package_hint(launcher)));
}

int take_node_prefix(const std::string& launcher, std::string_view& line, const std::vector<std::string>& hosts) {
  std::string_view text = line;
  int node = -1;
  if (launcher == "pdsh") {  // "host: text", or pdsh's own "pdsh@launcher: host: text"
    if (text.rfind("pdsh@", 0) == 0 && text.find(": ") != std::string_view::npos) text.remove_prefix(text.find(": ") + 2);
    if (size_t colon = text.find(": "); colon != std::string_view::npos)
      for (size_t i = 0; i < hosts.size() && node < 0; ++i)
        if (std::string_view(hosts[i]).substr(hosts[i].find('@') + 1) == text.substr(0, colon)) {
          node = static_cast<int>(i);
          text.remove_prefix(colon + 2);
        }
    line = text;
    return node;
  }
  if (launcher == "openmpi") {  // "[job,rank]<stdout>:text"
    size_t comma = text.find(',');
    if (!take(text, "[") || comma == std::string_view::npos) return -1;
    text.remove_prefix(comma);  // past "[job,"
    if ((node = take_number(text)) < 0 || !(take(text, "]<stdout>:") || take(text, "]<stderr>:"))) return -1;
  } else if (launcher == "mpich") {  // "[rank] text"
    if (!take(text, "[") || (node = take_number(text)) < 0 || !take(text, "] ")) return -1;
  } else {  // srun --label: "rank: text", the rank right-aligned to the widest
    while (take(text, " ")) {
    }
    if ((node = take_number(text)) < 0 || !take(text, ": ")) return -1;
  }
  line = text;
  return node;
}

}  // namespace dsrun
