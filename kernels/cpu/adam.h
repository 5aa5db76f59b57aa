// Adam / AdamW over flat arrays, in the form of DeepSpeed's CPU optimizers (csrc/includes/cpu_adam.h,
// which its CPU FusedAdam also runs), per element in fp32 (adam_element.h):
//   L2 mode (decoupled false):  g ← g + wd·p
//   m ← β1·m + (1−β1)·g            v ← β2·v + (1−β2)·g²
//   AdamW mode (decoupled):     p ← p + (−lr·wd)·p
//   p ← p + (−lr/bc1) · m / (sqrt(v)·(1/sqrt(bc2)) + eps)      bc = 1 − β^t, or 1 without bias correction
// One division per element (the GPU FusedAdam form, (m/bc1)/(sqrt(v/bc2)+eps), has two and is the same
// algebraically).
//
// Fused with mixed precision's passes around the update, so a step reads and writes each array once:
// gradients are read in their storage (fp32, bf16 or fp16) and multiplied by grad_scale (the unscale and
// clip factor: float(g · scale) with the product in double, as a separate pass rounds it); parameters and
// moments are fp32 or bf16; the updated parameter is also rounded into `param_copy` when given (the
// model's 16-bit weights beside an fp32 master). Bytes per element with an fp32 master, 16-bit
// gradients and copy: 2 + 12 read, 12 + 2 written (28), against 48 for the four passes it replaces.
//
// Split over the kernels' threads (parallel.h). Elements are independent and no clone fuses a
// multiply-add (adam.cpp is built with -ffp-contract=off), so the bits are the same at any thread count,
// on every vector tier, and on the GPU (kernels/cuda/adam.cuh runs the same element body).
#pragma once
#include <cstddef>

#include "amp/storage.h"
#include "cpu/adam_element.h"

namespace ds::cpu {

struct AdamArrays {
  void* params;        // [n] of param_type: F32 or BF16, updated in place
  const void* grads;   // [n] of grad_type: F32, BF16 or F16
  void* exp_avg;       // m [n] of state_type: F32 or BF16
  void* exp_avg_sq;    // v [n] of state_type
  size_t n;
  amp::Storage param_type = amp::Storage::F32;
  amp::Storage grad_type = amp::Storage::F32;
  amp::Storage state_type = amp::Storage::F32;
  double grad_scale = 1.0;       // gradients are multiplied by it as they are read
  void* param_copy = nullptr;    // [n] of copy_type (F16 or BF16): the updated parameters rounded, or none
  amp::Storage copy_type = amp::Storage::BF16;
};

// Throws std::invalid_argument for a storage an array cannot have (fp16 parameters or moments, an fp32
// copy), before anything is written.
void adam_step(const AdamArrays& arrays, const AdamArgs& args, bool decoupled);
// The same one element at a time on the calling thread: the scalar reference.
void adam_step_reference(const AdamArrays& arrays, const AdamArgs& args, bool decoupled);

}  // namespace ds::cpu
