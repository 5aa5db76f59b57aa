// RMSprop's element loop over flat arrays (the update: rmsprop_element.h); the optimizer
// (runtime/optim/rmsprop.cpp) holds the state and calls it per segment. Parameters, gradients and the state
// are fp32 or bf16 (elements.h); each element computes in fp32 and rounds once when stored. Split over the
// kernels' threads (parallel.h); elements are independent, so the bits do not depend on the thread count. No
// clone fuses a multiply-add (-ffp-contract=off). rmsprop_step_reference: the plain loop on the calling thread,
// the formulas written out again.
#pragma once
#include <cstddef>

#include "amp/storage.h"
#include "cpu/rmsprop_element.h"

namespace ds::cpu {

// The state [n] each, of state_type: square_avg always; grad_avg when args.centered, momentum_buffer when
// args.momentum > 0 (else nullptr, not read).
struct RmspropState {
  void* square_avg = nullptr;
  void* grad_avg = nullptr;
  void* momentum_buffer = nullptr;
};

void rmsprop_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                  const RmspropState& state, amp::Storage state_type, size_t n, const RmspropArgs& args);
void rmsprop_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                            const RmspropState& state, amp::Storage state_type, size_t n, const RmspropArgs& args);

}  // namespace ds::cpu
