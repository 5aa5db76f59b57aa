// Softmax cross-entropy on the GPU (formulas: kernels/cpu/cross_entropy.h), one block per row:
// m = block_max of the logits, s = log of the block_sum of exp(x − m), row loss = m + s − x[label].
// Sums are fp32 in a fixed order (the CPU sums in double). A label outside [0, classes) cannot throw
// on the device: that row's loss and stats are NaN. The mean over rows is the caller's.
// Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <math.h>

#include <cstdint>

#include "cuda/block_reduce.cuh"

namespace ds::cuda {

// grid.x = rows, block.x a multiple of 32; logits [rows, classes], labels [rows], stats [rows, 2],
// row_loss [rows].
DS_KERNEL void cross_entropy_forward_kernel(const float* logits, const int32_t* labels, int64_t classes, float* stats,
                                            float* row_loss) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* x = logits + row * classes;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, x[c]);
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) sum += expf(x[c] - m);
  const float s = logf(block_sum(sum, scratch));
  if (threadIdx.x == 0) {
    const int32_t label = labels[row];
    const bool valid = label >= 0 && label < classes;
    stats[2 * row] = valid ? m : NAN;
    stats[2 * row + 1] = valid ? s : NAN;
    row_loss[row] = valid ? m + s - x[label] : NAN;
  }
}

// dlogits[r, c] = (exp(x − m − s) − [c == label]) · scale, scale = g / rows; grid.x = rows, any block.x.
DS_KERNEL void cross_entropy_backward_kernel(const float* logits, const int32_t* labels, const float* stats,
                                             float scale, int64_t classes, float* dlogits) {
  const int64_t row = blockIdx.x;
  const float *x = logits + row * classes, m = stats[2 * row], s = stats[2 * row + 1];
  float* dx = dlogits + row * classes;
  const int32_t label = labels[row];
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    dx[c] = (expf(x[c] - m - s) - (c == label ? 1.0f : 0.0f)) * scale;
}

}  // namespace ds::cuda
