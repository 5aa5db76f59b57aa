// LayerNorm forward on the GPU (the formulas and the fp32/double reference: kernels/cpu/layernorm.h),
// one block per row: the mean, then the variance about it (two passes, as the CPU kernel), each a
// block_sum in fp32 with a fixed order; y = (x − μ)·ρ·gamma + beta, stats[row] = {μ, ρ}.
// Written in the CUDA subset: nvcc compiles it, and the SIMT emulator runs it in the unit tests.
#pragma once
#include <cstdint>

#include "cuda/block_reduce.cuh"

namespace ds::cuda {

// grid.x = rows, block.x = a multiple of 32 (at most 1024); x, y [rows, dim], gamma, beta [dim],
// stats [rows, 2].
DS_KERNEL void layernorm_forward_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                        float* stats, int64_t dim, float eps) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  float* yr = y + row * dim;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) sum += xr[c];
  const float mean = block_sum(sum, scratch) / static_cast<float>(dim);
  float squares = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float d = xr[c] - mean;
    squares += d * d;
  }
  const float rstd = 1.0f / sqrtf(block_sum(squares, scratch) / static_cast<float>(dim) + eps);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
  if (threadIdx.x == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
}

}  // namespace ds::cuda
