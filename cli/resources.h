// Where ranks can run: the hostfile's hosts, the Slurm allocation's, or this machine alone (its GPUs, else its CPUs),
// and the transport that reaches them. Reads the hostfile, the environment and the GPU driver.
#pragma once
#include <string>
#include <vector>

#include "options.h"
#include "selection.h"

namespace dsrun {

struct Resources {
  Selection selection;      // after --include/--exclude/--num_nodes/--num_gpus
  bool from_hostfile = false;
  bool from_slurm = false;  // no hostfile: the hosts of the Slurm allocation dsrun runs in
  std::string accelerator;  // "cuda" or "cpu"
  std::vector<std::string> notes;  // what was decided and why, for the user
};

// Number of CUDA devices visible to this process (libcuda or NVML, loaded at run time); 0 without a GPU.
int local_gpu_count();
// True for names that mean this machine: localhost, 127.x.x.x, ::1, this hostname. user@host is never local.
bool is_local_host(const std::string& host);

// Builds the pool (hostfile, the Slurm allocation (allocation.h), or localhost with DSRUN_LOCAL_SLOTS / GPU count / CPU count; the
// CUDA_VISIBLE_DEVICES rule) and applies the selection flags. Throws InputError.
Resources resolve_resources(const LaunchOptions& options);

// --launcher if given, else "local" when every selected host is this machine, else "slurm" for
// the hosts of a Slurm allocation and "ssh" for a hostfile's.
std::string choose_transport(const LaunchOptions& options, const Resources& resources);

}  // namespace dsrun
