// The collectives a split model's layers call (ds_plugin.h's ds_collectives): the tensor-parallel
// group's all-reduce and the sequence-parallel group's all-to-alls (DeepSpeed-Ulysses), on host memory.
#pragma once
#include <vector>

#include "comm/process_group.h"
#include "plugin/ds_plugin.h"

namespace ds {

struct ModelGroups {
  ProcessGroup* tensor = nullptr;    // nullptr: no tensor parallelism
  ProcessGroup* sequence = nullptr;  // nullptr: no sequence parallelism
  std::vector<float> send, recv;     // the all-to-alls' staging
};

// The table handed to the plugin; its ctx is `groups`, which must outlive the plugin's use of it.
ds_collectives model_collectives(ModelGroups& groups);

}  // namespace ds
