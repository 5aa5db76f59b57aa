// dsrun inside a cluster allocation. Under Slurm (sbatch, salloc) with no hostfile, the hosts are
// the allocation's nodes (SLURM_JOB_NODELIST, compressed lists like node[01-04,07] expanded) and each
// host's slots are SLURM_GPUS_PER_NODE when set, else its share of SLURM_TASKS_PER_NODE ("2(x3),1").
// dsrun run as one of several tasks of an srun or mpirun (each would launch the whole job) is an
// error unless --no_ssh, where the task's node index comes from SLURM_NODEID, OMPI_COMM_WORLD_RANK
// or PMI_RANK.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "selection.h"

namespace dsrun {

// Slurm's host list syntax: comma-separated names, each with any number of bracketed ranges and
// numbers ("rack[1-2]-n[01-03,07]"), zero padding kept. Throws InputError naming `origin`.
std::vector<std::string> expand_slurm_hostlist(std::string_view list, std::string_view origin);

// Slurm's per-node counts, "2(x3),1" → 2,2,2,1; must give exactly `nodes` counts. Throws InputError.
std::vector<int> expand_slurm_counts(std::string_view text, size_t nodes, std::string_view origin);

struct Allocation {
  Selection pool;    // the nodes in Slurm's order, slots 0..n-1 each
  std::string note;  // what was read, for the user
};

// The Slurm allocation this process runs in (SLURM_JOB_NODELIST set), or nothing.
std::optional<Allocation> slurm_allocation();

// The fewest CPUs any node of this process's Slurm allocation has (SLURM_JOB_CPUS_PER_NODE), or 0
// outside one or when it cannot be read.
int allocation_cpus_per_node();

// When this process is task `rank` of `size` > 1 of an srun step or an MPI job: which one, and the
// variable that said so ("SLURM_PROCID"...), the node index to use with --no_ssh and its variable.
struct ToolTask {
  int rank = 0, size = 0, node = 0;
  std::string rank_variable, node_variable;
};
std::optional<ToolTask> tool_task();

}  // namespace dsrun
