// The --no_ssh mode's plan adjustments (no_ssh.h).
#include "no_ssh.h"

#include <cstdlib>

#include <fmt/format.h>

#include "errors.h"

namespace dsrun {

void no_ssh_inputs(const LaunchOptions& o, const Selection& selection, PlanInputs& in, std::vector<std::string>& notes) {
  in.transport = "local";
  int hosts = 0;
  std::string first;
  for (const auto& node : selection)
    if (!node.slots.empty() && hosts++ == 0) first = node.host.substr(node.host.find('@') + 1);
  in.master_addr = o.master_addr;
  if (in.master_addr.empty()) {
    in.master_addr = hosts > 1 ? first : "127.0.0.1";
    if (hosts > 1)
      notes.push_back(fmt::format("--no_ssh: MASTER_ADDR={} (the first selected host; override with --master_addr)",
                                  in.master_addr));
  }
  in.job_id = fmt::format("{}:{}", in.master_addr, o.master_port);  // the same on every node
}

void keep_own_node(const LaunchOptions& o, JobPlan& plan, std::vector<std::string>& notes) {
  const int nodes = static_cast<int>(plan.nodes.size());
  int node_rank = o.node_rank;
  if (node_rank < 0 && nodes == 1) node_rank = 0;
  if (node_rank < 0)
    throw InputError(fmt::format("--no_ssh needs --node_rank: this node's index among the {} selected hosts (0..{})",
                                 nodes, nodes - 1));
  if (node_rank >= nodes)
    throw InputError(fmt::format("--node_rank {}: the selection has {} host{} (0..{})", node_rank, nodes,
                                 nodes == 1 ? "" : "s", nodes - 1));
  NodePlan own = std::move(plan.nodes[static_cast<size_t>(node_rank)]);
  plan.nodes.clear();
  plan.nodes.push_back(std::move(own));
  const char* token = std::getenv("DS_JOB_TOKEN");
  plan.token = token ? token : "";
  if (plan.token->empty() && nodes > 1)
    notes.push_back("--no_ssh: the rendezvous is not authenticated; set the same DS_JOB_TOKEN on every node to require it");
  notes.push_back(fmt::format("--no_ssh: node {} of {} ({}), ranks {}..{} of {}", node_rank, nodes,
                              plan.nodes[0].host, plan.nodes[0].ranks.front().rank, plan.nodes[0].ranks.back().rank,
                              plan.world_size));
}

}  // namespace dsrun
