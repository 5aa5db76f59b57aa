// SGD and LAMB's element loops over flat arrays; the optimizers (runtime/optim) hold the state and
// call them per segment or tensor. Parameters, gradients and state are fp32 or bf16 (elements.h);
// each element computes in fp32 and rounds once when stored.
//
// SGD as torch.optim.SGD:
//   d ← g + wd·p;  with momentum μ ≠ 0: buf ← d on the first step, else μ·buf + (1 − dampening)·d,
//   d ← d + μ·buf (nesterov) or buf;  p ← p − lr·d
// (the element body: sgd_element.h, shared with the GPU's kernel)
// LAMB as DeepSpeed's FusedLamb (csrc/lamb/fused_lamb_cuda_kernel.cu), per tensor, in two passes (the
// element bodies: lamb_element.h, shared with the GPU's kernels):
//   lamb_moments: m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², and the sums Σp², Σu² of
//                 u = m / (sqrt(v) + eps) + wd·p  (sqrt(v + eps) with eps_inside_sqrt), in double;
//   lamb_apply:   p ← p − scale·u, scale = step size × the clamped trust ratio ‖p‖/‖u‖ the caller forms
//                 (after summing the partial norms across ranks).
// Split over the kernels' threads (parallel.h). Elements are independent, so SGD and lamb_apply give the
// same bits at any thread count; lamb_moments' sums add fixed blocks of kSumBlock elements (convert.h) in
// block order, so they depend on n only. No clone fuses a multiply-add (-ffp-contract=off). Each has a
// `_reference`: the plain loop on the calling thread (its sums in one pass, in order).
#pragma once
#include <cstddef>

#include "amp/storage.h"
#include "cpu/lamb_element.h"
#include "cpu/sgd_element.h"

namespace ds::cpu {

// buf: [n] of state_type, unused (may be null) without momentum.
void sgd_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* buf,
              amp::Storage state_type, size_t n, const SgdArgs& args);
void sgd_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* buf,
                        amp::Storage state_type, size_t n, const SgdArgs& args);

struct LambArrays {
  void* params;        // [n] of param_type
  const void* grads;   // [n] of grad_type
  void* exp_avg;       // m [n] of state_type
  void* exp_avg_sq;    // v [n] of state_type
  size_t n;
  amp::Storage param_type = amp::Storage::F32;
  amp::Storage grad_type = amp::Storage::F32;
  amp::Storage state_type = amp::Storage::F32;
};

struct LambSums {
  double p_sq = 0.0, u_sq = 0.0;  // Σp², Σu² over the elements
};

LambSums lamb_moments(const LambArrays& arrays, const LambArgs& args);
void lamb_apply(const LambArrays& arrays, const LambArgs& args, float scale);
LambSums lamb_moments_reference(const LambArrays& arrays, const LambArgs& args);
void lamb_apply_reference(const LambArrays& arrays, const LambArgs& args, float scale);

}  // namespace ds::cpu
