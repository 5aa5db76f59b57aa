// Parsing of dsrun's command line with CLI11. Flags keep DeepSpeed's spelling and also accept
// the dash-spelled aliases; everything from PROGRAM on is passed to the ranks untouched.
#include "options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <iostream>

#include "core_list.h"
#include "errors.h"
#include "fanout_tools.h"

namespace dsrun {
namespace {

constexpr const char* kExamples = R"(
Examples:
  dsrun hostname                                   one rank per local CPU (or GPU), no hostfile
  dsrun --num_gpus 2 ./train --config ds.json      two local ranks
  dsrun -H hosts.txt python3 train.py              every slot of every host in hosts.txt (over SSH)
  dsrun -H hosts.txt -i 'node-a:0,1@node-b' ./t    slots 0,1 of node-a and all of node-b
  dsrun -H hosts.txt --num_nodes 2 --num_gpus 4 ./t
  dsrun -H hosts.txt --dry_run --format json ./t   print the plan (ranks and environment), start nothing
  dsrun report [--format json]                     what this machine offers a job (like ds_report)

Exit status: the first failing rank's exit code (128+N if it was killed by signal N; with
--max_restarts, the last attempt's), 1 if the job could not be started, 2 for bad input
(flags, hostfile, selection).
Docs: docs/launcher.md (hostfile and --include grammar, rank environment, --dry_run JSON).
)";

// The default --comm_timeout: DS_COMM_TIMEOUT (seconds) or DeepSpeed's DEEPSPEED_TIMEOUT (minutes)
// from dsrun's environment, as dsworker reads them; else 300 s.
double timeout_from_environment() {
  for (auto [name, scale] : {std::pair{"DS_COMM_TIMEOUT", 1.0}, std::pair{"DEEPSPEED_TIMEOUT", 60.0}}) {
    const char* text = std::getenv(name);
    if (!text || !*text) continue;
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (*end != '\0' || !(v > 0) || v * scale > 1e7)
      throw InputError(fmt::format("{}='{}' (from the environment) is not a positive number of {}", name, text,
                                   scale == 1.0 ? "seconds" : "minutes"));
    return v * scale;
  }
  return 300;
}

}  // namespace

bool parse_options(int argc, char** argv, LaunchOptions& o) {
  CLI::App app{"dsrun: start PROGRAM once per selected slot on every selected host.", "dsrun"};

  app.footer(kExamples);
  app.prefix_command();  // the first positional and everything after it belong to PROGRAM

  app.add_option("-H,--hostfile", o.hostfile, "Hostfile: 'host slots=N' lines (default /job/hostfile; "
                                              "if that is missing, run on this machine only)");
  app.add_option("-i,--include", o.include, "Keep only these resources: host[:slot,slot][@host...]");
  app.add_option("-e,--exclude", o.exclude, "Drop these resources (same grammar as --include)");
  app.add_option("--num_nodes,--num-nodes", o.num_nodes, "Use the first N hosts");
  app.add_option("--num_gpus,--num-gpus,--num_accelerators,--num-accelerators", o.num_gpus,
                 "Use slots 0..N-1 of each host");
  app.add_option("--master_addr,--master-addr", o.master_addr,
                 "Rank 0's address (default: the first host's address as reached over SSH, 127.0.0.1 locally)");
  app.add_option("--master_port,--master-port", o.master_port, "Rendezvous port (default 29500)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--launcher", o.launcher,
                 "Transport: ssh (libssh), pdsh, openmpi (mpirun), mpich (hydra's mpiexec), slurm (srun) or local "
                 "(default: ssh if any host is not this machine)");
  app.add_option("--launcher_args,--launcher-args,--launcher_arg", o.launcher_args,
                 "Extra transport options; pdsh, openmpi, mpich, slurm: inserted into the tool's command line before the "
                 "agent (split as a shell would); ssh: -p PORT, -l USER, -i FILE, -o ConnectTimeout=S|Port=|User=|"
                 "IdentityFile=|UserKnownHostsFile=|StrictHostKeyChecking=yes|accept-new");
  app.add_option("--ssh_port,--ssh-port", o.ssh_port, "SSH port (default: ~/.ssh/config or 22)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--ssh_identity,--ssh-identity", o.ssh_identity, "Private key for SSH (default: agent, ~/.ssh/id_*)");
  app.add_option("--ssh_known_hosts,--ssh-known-hosts", o.ssh_known_hosts,
                 "known_hosts file to check host keys against (default ~/.ssh/known_hosts)");
  app.add_flag("--ssh_accept_new,--ssh-accept-new", o.ssh_accept_new,
               "Trust and record host keys seen for the first time (a changed key is still an error)");
  app.add_option("--ssh_timeout,--ssh-timeout", o.ssh_timeout_s, "SSH connect timeout in seconds (default 10)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--remote_dsrun,--remote-dsrun", o.remote_dsrun,
                 "Path of dsrun on the remote hosts (default: this dsrun's absolute path)");
  app.add_option("--enable_each_rank_log,--enable-each-rank-log,--log_dir,--log-dir", o.log_dir,
                 "Also write each rank's output to DIR/<time>_rank<N>.log on its host");
  app.add_flag("--bind_cores_to_rank,--bind-cores-to-rank", o.bind_cores_to_rank,
               "Pin each rank to an equal share of its host's physical cores and set OMP_NUM_THREADS");
  app.add_option("--bind_core_list,--bind-core-list", o.bind_core_list, "Cores to share out, e.g. 0-15,32-47");
  app.add_option("--export", o.exports, "Set NAME=VALUE in every rank's environment (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--dry_run,--dry-run", o.dry_run, "Print the plan; connect to nothing, start nothing");
  app.add_option("--format", o.format, "Output: text, or json (the plan with --dry_run, JSON lines otherwise)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_flag("-q,--quiet", o.quiet, "No launcher messages and no [rank N] prefixes");
  app.add_flag("--no_prefix,--no-prefix", o.no_prefix, "Print rank output without the [rank N] prefix");
  app.add_flag("--pass_local_rank,--pass-local-rank", o.pass_local_rank,
               "Append --local_rank=N to PROGRAM's arguments (DeepSpeed passes it by default; dsrun only on request)");
  app.add_option("--kill_grace,--kill-grace", o.kill_grace_s,
                 "Seconds between SIGTERM and SIGKILL when tearing the job down (default 5)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--comm_timeout,--comm-timeout", o.comm_timeout_s,
                 "Seconds a rank may make no progress (heartbeats stop) before the job is stopped, naming it; "
                 "also every collective's and store wait's limit in the ranks (DS_COMM_TIMEOUT; default: "
                 "$DS_COMM_TIMEOUT, $DEEPSPEED_TIMEOUT minutes, or 300)")
      ->check(CLI::Range(0.1, 1e7));
  std::string max_restarts;  // checked below, for a message that names the rule
  app.add_option("--max_restarts,--max-restarts", max_restarts,
                 "After a rank fails (or a host's agent is lost), stop every rank and start the job again, "
                 "up to N times (default 0); ranks see DSRUN_RESTART_COUNT")
      ->type_name("INT")
      ->allow_extra_args(false);
  bool ignored = false;
  app.add_flag("--no_local_rank,--no-local-rank,--no_python,--no-python,--no_ssh_check,--no-ssh-check", ignored,
               "Accepted for DeepSpeed compatibility (already dsrun's behaviour)");
  bool force_multi = false;
  app.add_flag("--force_multi,--force-multi", force_multi, "Same as --launcher ssh");
  app.add_flag("--no_ssh,--no-ssh", o.no_ssh,
               "Start only this node's ranks (--node_rank of the plan) here; run dsrun so on every node, "
               "with the same hostfile, --master_addr and --master_port");
  app.add_option("--node_rank,--node-rank", o.node_rank, "With --no_ssh: this node's index among the selected hosts");
  app.set_version_flag("--version", fmt::format("dsrun {}", DSRUN_VERSION));

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw InputError(e.what());
  }
  o.hostfile_given = app.count("--hostfile") > 0;
  if (app.count("--comm_timeout") == 0) o.comm_timeout_s = timeout_from_environment();
  o.program = app.remaining();
  if (o.program.empty()) throw InputError("no PROGRAM given (usage: dsrun [options] PROGRAM [ARGS...]; see --help)");
  if (o.program[0].size() > 1 && o.program[0][0] == '-')
    throw InputError(fmt::format("unknown option '{}' (see --help)", o.program[0]));
  if (force_multi) {
    if (!o.launcher.empty() && o.launcher != "ssh")
      throw InputError(fmt::format("--force_multi conflicts with --launcher {}", o.launcher));
    o.launcher = "ssh";
  }
  for (auto& c : o.launcher) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));  // as DeepSpeed
  if (o.launcher == "impi" || o.launcher == "mvapich")
    throw InputError(fmt::format("--launcher {}: not supported (its mpirun is not in Debian to test against); "
                                 "use mpich (hydra's mpiexec), openmpi, slurm, pdsh or ssh", o.launcher));
  if (!o.launcher.empty() && o.launcher != "local" && o.launcher != "ssh" && !is_fanout_launcher(o.launcher))
    throw InputError(fmt::format("--launcher {}: must be ssh, pdsh, openmpi, mpich, slurm or local", o.launcher));
  if (app.count("--node_rank") > 0 && !o.no_ssh)
    throw InputError(fmt::format("--node_rank {} needs --no_ssh (dsrun starts every node itself otherwise)", o.node_rank));
  if (o.no_ssh && !o.launcher.empty() && o.launcher != "local")
    throw InputError(fmt::format("--no_ssh conflicts with --launcher {}", o.launcher));
  if (app.count("--max_restarts") > 0) {
    const char* end = max_restarts.data() + max_restarts.size();
    const auto [stop, error] = std::from_chars(max_restarts.data(), end, o.max_restarts);
    if (error != std::errc() || stop != end || max_restarts.empty() || o.max_restarts < 0)
      throw InputError(fmt::format("--max_restarts '{}' is not a non-negative integer", max_restarts));
  }
  if (o.no_ssh && o.max_restarts > 0)
    throw InputError("--max_restarts is not supported with --no_ssh (each node's dsrun would restart on its own)");
  if (o.log_dir == "None") o.log_dir.clear();  // DeepSpeed's spelling of "off"
  if (app.count("--bind_core_list") > 0) {  // checked here, so a bad list fails before any host is contacted
    if (!o.bind_cores_to_rank) throw InputError("--bind_core_list needs --bind_cores_to_rank");
    o.bind_core_ids = parse_core_list(o.bind_core_list);
  }
  return true;
}

}  // namespace dsrun
