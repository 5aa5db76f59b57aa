// Lion's element loop over flat arrays (the update: lion_element.h, shared with the GPU's kernel); the
// optimizer (runtime/optim/lion.cpp) holds the momentum and calls it per segment. Parameters, gradients and
// the momentum are fp32 or bf16 (elements.h); each element computes in fp32 and rounds once when stored.
// Split over the kernels' threads (parallel.h); elements are independent, so the bits do not depend on the
// thread count. No clone fuses a multiply-add (-ffp-contract=off). lion_step_reference: the plain loop on the
// calling thread, the formulas written out again.
#pragma once
#include <cstddef>

#include "amp/storage.h"
#include "cpu/lion_element.h"

namespace ds::cpu {

// exp_avg: the momentum m [n] of state_type.
void lion_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* exp_avg,
               amp::Storage state_type, size_t n, const LionArgs& args);
void lion_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                         void* exp_avg, amp::Storage state_type, size_t n, const LionArgs& args);

}  // namespace ds::cpu
