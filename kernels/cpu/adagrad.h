// Adagrad's element loop over flat arrays (the update: adagrad_element.h); the optimizer
// (runtime/optim/adagrad.cpp) holds the sum of squares and calls it per segment. Parameters, gradients and the
// sum are fp32 or bf16 (elements.h); each element computes in fp32 and rounds once when stored. Split over the
// kernels' threads (parallel.h); elements are independent, so the bits do not depend on the thread count. No
// clone fuses a multiply-add (-ffp-contract=off). adagrad_step_reference: the plain loop on the calling thread,
// the formulas written out again.
#pragma once
#include <cstddef>

#include "amp/storage.h"
#include "cpu/adagrad_element.h"

namespace ds::cpu {

// sum: the sum of squared gradients [n] of state_type.
void adagrad_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* sum,
                  amp::Storage state_type, size_t n, const AdagradArgs& args);
void adagrad_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                            void* sum, amp::Storage state_type, size_t n, const AdagradArgs& args);

}  // namespace ds::cpu
