// Resource selection: which slots (devices) of which hosts a job runs on, from the hostfile pool
// and `--include/--exclude/--num_nodes/--num_gpus`. Follows the semantics DeepSpeed's unit tests
// pin (tests/unit/launcher/test_run.py), not the buggy path its runner.main() takes.
#pragma once
#include <string>
#include <vector>

#include "hostfile.h"

namespace dsrun {

struct NodeSlots {
  std::string host;
  std::vector<int> slots;  // selected slot ids, ascending
};
using Selection = std::vector<NodeSlots>;  // in hostfile order

// host -> [0..slots-1] for every hostfile entry, in file order.
Selection pool_from_hostfile(const std::vector<HostEntry>& hosts);

struct SelectionRequest {
  // `NODE[@NODE...]`, NODE = `name` or `name:s1,s2,...`; empty = not given. The `{}` keep GCC's
  // -Wmissing-field-initializers quiet for designated initializers such as `{.num_nodes = 2}`.
  std::string include{};
  std::string exclude{};
  int num_nodes = -1;  // -1 = not given
  int num_gpus = -1;   // -1 = not given
};

// Applies include/exclude, then num_nodes, then num_gpus to `pool`; the result keeps pool order and
// has at least one slot. Throws InputError on a bad spec, an unknown host or slot, or conflicting flags.
Selection select_resources(const Selection& pool, const SelectionRequest& request);

}  // namespace dsrun
