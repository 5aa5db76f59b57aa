// dsrun's entry point: `dsrun agent` runs the node agent; anything else is a launch:
// options → resources → plan → (dry run | run the job).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string_view>

#include <fmt/format.h>

#include "agent.h"
#include "agent_link.h"
#include "allocation.h"
#include "console.h"
#include "env_file.h"
#include "errors.h"
#include "fanout_tools.h"
#include "launcher.h"
#include "no_ssh.h"
#include "options.h"
#include "plan.h"
#include "report.h"
#include "resources.h"

extern char** environ;

namespace dsrun {
namespace {

// What every rank gets on top of its host's environment: forwarded launcher variables, then
// .deepspeed_env from ~ and the cwd (the cwd's wins), then --export.
std::vector<EnvVar> collect_environment(const LaunchOptions& o) {
  const auto& reserved = rank_variable_names();
  std::vector<EnvVar> env = forwarded_environment(environ, reserved);
  const char* name = std::getenv("DS_ENV_FILE");
  std::string file = name && *name ? name : ".deepspeed_env";
  std::vector<std::string> candidates;
  if (const char* home = std::getenv("HOME")) candidates.push_back(std::filesystem::path(home) / file);
  candidates.push_back(std::filesystem::absolute(file).string());
  auto add = [&](const EnvVar& v, const std::string& origin) {
    for (const auto& r : reserved)
      if (v.name == r) throw InputError(fmt::format("{}: {} is set by dsrun for each rank and cannot be overridden",
                                                    origin, v.name));
    set_env(env, v.name, v.value);
  };
  std::error_code ec;
  for (const auto& path : candidates)
    if (std::filesystem::is_regular_file(path, ec))
      for (const auto& v : read_env_file(path)) add(v, path);
  for (const auto& text : o.exports) add(parse_export(text), "--export");
  return env;
}

std::string job_id() {
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return fmt::format("{}-{}", stamp, ::getpid());
}

// dsrun started as one of several tasks of srun or mpirun: with --no_ssh the task's node index is
// the node rank; without it every task would launch the whole job, which is an error.
LaunchOptions options_for_tool_task(LaunchOptions o) {
  const auto task = tool_task();
  if (!task) return o;
  if (!o.no_ssh)
    throw InputError(fmt::format("dsrun runs as task {} of {} ({}): each task would start the whole job. Run dsrun "
                                 "once (it starts every node), or add --no_ssh so that each task starts its own "
                                 "node's ranks (the node from {})", task->rank, task->size, task->rank_variable,
                                 task->node_variable));
  if (o.node_rank < 0) o.node_rank = task->node;
  return o;
}

int launch(const LaunchOptions& options) {
  const LaunchOptions o = options_for_tool_task(options);
  Resources res = resolve_resources(o);
  PlanInputs in;
  in.transport = o.no_ssh ? "local" : choose_transport(o, res);
  in.master_addr = o.master_addr;
  in.job_id = job_id();
  if (o.no_ssh) no_ssh_inputs(o, res.selection, in, res.notes);
  if (in.master_addr.empty() && in.transport == "local") in.master_addr = "127.0.0.1";
  if (in.master_addr.empty() && o.dry_run) {  // connects to nothing: the first host's name as written
    for (const auto& node : res.selection)
      if (!node.slots.empty()) {
        in.master_addr = node.host.substr(node.host.find('@') + 1);
        break;
      }
  }
  in.master_port = o.master_port;
  in.accelerator = res.accelerator;
  in.max_restarts = o.max_restarts;
  in.comm_timeout_s = o.comm_timeout_s;
  in.forwarded = collect_environment(o);
  in.argv = o.program;
  JobPlan plan = make_plan(res.selection, in);
  if (o.no_ssh) keep_own_node(o, plan, res.notes);
  for (const auto& node : plan.nodes)  // every host shares out the same list: each of its ranks needs a core
    if (!o.bind_core_ids.empty() && o.bind_core_ids.size() < node.ranks.size())
      throw InputError(fmt::format("--bind_core_list '{}': {} cores for the {} ranks on {}; each rank needs at least one",
                                   o.bind_core_list, o.bind_core_ids.size(), node.ranks.size(), node.host));
  if (is_fanout_launcher(plan.transport)) {
    std::vector<std::string> hosts;
    for (const auto& node : plan.nodes) hosts.push_back(node.host);
    check_fanout_input(plan.transport, hosts, o);
  }

  if (o.dry_run) {
    if (o.format == "json")
      std::cout << plan_to_json(plan).dump(2) << "\n";
    else
      std::cout << plan_to_text(plan);
    return 0;
  }
  if (is_fanout_launcher(plan.transport)) check_fanout_tool(plan.transport);
  Console job_console({o.format == "json", o.quiet, !o.no_prefix, plan.nodes.size() > 1});
  for (const auto& note : res.notes) job_console.info(note);
  size_t here = 0;
  for (const auto& node : plan.nodes) here += node.ranks.size();
  job_console.info(fmt::format("{} ranks{} on {} host(s) via {}", here,
                               here < static_cast<size_t>(plan.world_size) ? fmt::format(" of {}", plan.world_size) : "",
                               plan.nodes.size(), plan.transport));
  return run_job(std::move(plan), o, job_console);
}

}  // namespace
}  // namespace dsrun

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "agent") {
    if (argc == 5 && std::string_view(argv[2]) == "--listen" && std::string_view(argv[3]) == "--node")
      return dsrun::run_listening_agent(std::atoi(argv[4]));
    if (argc == 5 && std::string_view(argv[2]) == "--listen" && std::string_view(argv[3]) == "--node-env")
      return dsrun::run_listening_agent_from_env(argv[4]);
    return dsrun::run_agent();
  }
  if (argc >= 2 && std::string_view(argv[1]) == "report") return dsrun::run_report(argc, argv);
  try {
    dsrun::LaunchOptions options;
    if (!dsrun::parse_options(argc, argv, options)) return 0;
    return dsrun::launch(options);
  } catch (const dsrun::InputError& e) {
    std::fprintf(stderr, "dsrun: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsrun: error: %s\n", e.what());
    return 1;
  }
}
