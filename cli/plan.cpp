// Rank numbering and the per-rank environment (see plan.h and README.md "Rank environment").
#include "plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dsrun {

const std::vector<std::string>& rank_variable_names() {
  static const std::vector<std::string> names = {
      "RANK",        "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_SIZE",  "LOCAL_WORLD_SIZE",     "CROSS_RANK",
      "NODE_RANK",   "GROUP_RANK",  "CROSS_SIZE",  "MASTER_ADDR", "MASTER_PORT",          "CUDA_VISIBLE_DEVICES",
      "DS_ACCELERATOR", "DS_JOB_ID", "DS_JOB_TOKEN", "DS_COMM_TIMEOUT", "DSRUN_PLAN_ID", "DSRUN_HEARTBEAT_FD", "DSRUN_RESTART_COUNT", "DSRUN_MAX_RESTARTS",
      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"};
  return names;
}

JobPlan make_plan(const Selection& selection, const PlanInputs& in) {
  JobPlan plan;
  plan.master_addr = in.master_addr;
  plan.master_port = in.master_port;
  plan.transport = in.transport;
  plan.max_restarts = in.max_restarts;
  plan.comm_timeout_s = in.comm_timeout_s;
  plan.forwarded = in.forwarded;
  plan.argv = in.argv;
  for (const auto& node : selection)
    if (!node.slots.empty()) plan.nodes.push_back(NodePlan{node.host, static_cast<int>(plan.nodes.size()), node.slots, {}});
  for (const auto& node : plan.nodes) plan.world_size += static_cast<int>(node.slots.size());

  const std::string id = plan_id(plan);
  int rank = 0;
  const int cross_size = static_cast<int>(plan.nodes.size());
  for (auto& node : plan.nodes) {
    const int local_size = static_cast<int>(node.slots.size());
    const std::string visible = fmt::format("{}", fmt::join(node.slots, ","));
    for (int local = 0; local < local_size; ++local, ++rank) {
      std::vector<EnvVar> env = {
          {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(local)},
          {"WORLD_SIZE", std::to_string(plan.world_size)},
          {"LOCAL_SIZE", std::to_string(local_size)},
          {"LOCAL_WORLD_SIZE", std::to_string(local_size)},
          {"CROSS_RANK", std::to_string(node.node_rank)},
          {"NODE_RANK", std::to_string(node.node_rank)},
          {"GROUP_RANK", std::to_string(node.node_rank)},
          {"CROSS_SIZE", std::to_string(cross_size)},
          {"MASTER_ADDR", plan.master_addr},
          {"MASTER_PORT", std::to_string(plan.master_port)},
          {"CUDA_VISIBLE_DEVICES", visible},
          {"DS_ACCELERATOR", in.accelerator},
          {"DS_JOB_ID", in.job_id},
          {"DS_COMM_TIMEOUT", fmt::format("{:g}", in.comm_timeout_s)},
          {"DSRUN_PLAN_ID", id},
          {"DSRUN_RESTART_COUNT", "0"},
          {"DSRUN_MAX_RESTARTS", std::to_string(plan.max_restarts)},
          // torchrun's names, for scripts written for it (e.g. "resume when the restart count is > 0")
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts)},
      };
      node.ranks.push_back(RankPlan{rank, local, std::move(env)});
    }
  }
  return plan;
}

std::string plan_id(const JobPlan& plan) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a over "host:slot,slot@host:..."
  auto mix = [&](std::string_view text) {
    for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  };
  for (const auto& node : plan.nodes) {
    mix(node.host);
    mix(fmt::format(":{}@", fmt::join(node.slots, ",")));
  }
  return fmt::format("{:016x}", hash);
}

void set_master_addr(JobPlan& plan, const std::string& address) {
  plan.master_addr = address;
  for (auto& node : plan.nodes)
    for (auto& rank : node.ranks) set_env(rank.env, "MASTER_ADDR", address);
}

void set_restart_count(JobPlan& plan, int restarts) {
  for (auto& node : plan.nodes)
    for (auto& rank : node.ranks) {
      set_env(rank.env, "DSRUN_RESTART_COUNT", std::to_string(restarts));
      set_env(rank.env, "TORCHELASTIC_RESTART_COUNT", std::to_string(restarts));
    }
}

nlohmann::ordered_json plan_to_json(const JobPlan& plan) {
  using nlohmann::ordered_json;
  ordered_json nodes = ordered_json::array();
  for (const auto& node : plan.nodes) {
    ordered_json ranks = ordered_json::array();
    for (const auto& r : node.ranks) {
      ordered_json env = ordered_json::object();
      for (const auto& v : plan.forwarded) env[v.name] = v.value;
      for (const auto& v : r.env) env[v.name] = v.value;
      ranks.push_back(ordered_json{{"rank", r.rank}, {"local_rank", r.local_rank}, {"env", env}});
    }
    nodes.push_back(ordered_json{{"host", node.host}, {"node_rank", node.node_rank}, {"slots", node.slots}, {"ranks", ranks}});
  }
  ordered_json j{{"world_size", plan.world_size}, {"master_addr", plan.master_addr}, {"master_port", plan.master_port},
                 {"transport", plan.transport}};
  if (plan.max_restarts > 0) j["max_restarts"] = plan.max_restarts;  // only when given: the default shape is unchanged
  j["program"] = plan.argv;
  j["nodes"] = nodes;
  return j;
}

std::string plan_to_text(const JobPlan& plan) {
  std::string out = fmt::format("world size {}, transport {}, master {}:{}{}\nprogram: {}\n", plan.world_size,
                                plan.transport, plan.master_addr, plan.master_port,
                                plan.max_restarts > 0 ? fmt::format(", max restarts {}", plan.max_restarts) : "",
                                fmt::join(plan.argv, " "));
  for (const auto& node : plan.nodes) {
    out += fmt::format("node {} {}: slots {} (CUDA_VISIBLE_DEVICES={})\n", node.node_rank, node.host,
                       fmt::join(node.slots, ","), fmt::join(node.slots, ","));
    for (const auto& r : node.ranks) out += fmt::format("  rank {} local_rank {}\n", r.rank, r.local_rank);
  }
  if (!plan.forwarded.empty()) {
    out += "environment forwarded to every rank:\n";
    for (const auto& v : plan.forwarded) out += fmt::format("  {}={}\n", v.name, v.value);
  }
  return out;
}

}  // namespace dsrun
