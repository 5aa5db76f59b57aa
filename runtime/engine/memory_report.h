// Bytes held by a rank, by kind: in its host memory (Engine::memory) or on its device
// (Engine::device_memory).
#pragma once
#include <cstddef>
#include <utility>

namespace ds {

// Parameters and gradients include the pooled full-size copies of stages 2-3 (gathered layers, gradient
// buckets) at their peak so far. Under mixed precision the fp32 master copy counts as optimizer state (as in
// the ZeRO paper's K = 12), and the fp32 copies of gradients and of one unit's parameters made for the
// optimizer and the plugin as workspace (on the device: the buffers the collectives read and write).
struct MemoryReport {
  size_t params = 0, grads = 0, optimizer_state = 0, activations = 0, workspace = 0;
  size_t nvme = 0;         // bytes of optimizer state in this rank's swap file, not in memory
  size_t nvme_params = 0;  // bytes of parameters in this rank's swap file (offload_param), not in memory
  size_t model_states() const { return params + grads + optimizer_state; }
  void keep_larger(const MemoryReport& o) {  // each kind the larger of the two
    for (auto [mine, theirs] : {std::pair{&params, o.params}, {&grads, o.grads}, {&optimizer_state, o.optimizer_state},
                                {&activations, o.activations}, {&workspace, o.workspace}, {&nvme, o.nvme},
                                {&nvme_params, o.nvme_params}})
      if (theirs > *mine) *mine = theirs;
  }
};

}  // namespace ds
