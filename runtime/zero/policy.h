// What ZeRO shards across the data-parallel ranks, decided once from the stage (DeepSpeed's
// stages: 1 shards the optimizer state, 2 also the gradients, 3 also the parameters). The engine
// and zero/ ask the policy what is sharded instead of comparing stage numbers.
#pragma once
#include <stdexcept>
#include <string>

namespace ds::zero {

struct Policy {
  // Stages 1-3: the optimizer updates this rank's partition only, and the units are padded into
  // one chunk per rank (the layout partitions); the updated chunks are all-gathered (stages 1-2).
  bool optimizer_state = false;
  // Stages 2-3: no full gradient buffer; a unit's gradients are reduce-scattered from a bucket into
  // this rank's gradient partition on every micro-batch.
  bool gradients = false;
  // Stage 3: only this rank's partition of the parameters is held; a layer is gathered to run.
  bool parameters = false;

  static Policy for_stage(int stage) {
    if (stage < 0 || stage > 3) throw std::invalid_argument("ZeRO stage " + std::to_string(stage) + " is not 0-3");
    return Policy{stage >= 1, stage >= 2, stage == 3};
  }
  int stage() const { return parameters ? 3 : gradients ? 2 : optimizer_state ? 1 : 0; }
};

}  // namespace ds::zero
