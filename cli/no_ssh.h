// `--no_ssh --node_rank N` (DeepSpeed's "run dsrun on every node yourself"): every node's dsrun
// computes the same plan from the same hostfile and selection, starts only node N's ranks, locally,
// and the ranks of all nodes meet at --master_addr:--master_port. The ranks check at the rendezvous
// that every node computed the same plan (DSRUN_PLAN_ID, WORLD_SIZE), so a mismatch is an error
// naming both values, not a hang.
#pragma once
#include <string>
#include <vector>

#include "options.h"
#include "plan.h"

namespace dsrun {

// Fills what must be the same on every node before the plan is made: the master address (the
// first selected host's name when --master_addr is not given), a job id from it, the local
// transport. Appends what it decided to `notes`.
void no_ssh_inputs(const LaunchOptions& options, const Selection& selection, PlanInputs& inputs,
                   std::vector<std::string>& notes);

// Keeps only node --node_rank of `plan` (ranks keep their global numbers) and sets the job token
// every node shares: DS_JOB_TOKEN from dsrun's environment, or none (a note says so). Throws
// InputError for a node rank outside the selection.
void keep_own_node(const LaunchOptions& options, JobPlan& plan, std::vector<std::string>& notes);

}  // namespace dsrun
