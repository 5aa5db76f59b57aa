// Block-wide sums for the CUDA kernels (cuda_subset.h: the same source runs on the SIMT emulator):
// a butterfly of warp shuffles, one partial per warp through shared memory, and the butterfly again,
// so every thread gets the total and the order of additions is fixed (deterministic results).
#pragma once
#include <math.h>

#include "simt/cuda_subset.h"

namespace ds::cuda {

inline constexpr unsigned kFullWarp = 0xffffffffu;

// The sum of `value` (float or double) over the block's threads, in every thread. blockDim.x must be
// a multiple of 32 (whole warps) and blockDim.y = blockDim.z = 1; `scratch` is a shared array of 32
// values, free again when this returns.
template <typename T>
DS_DEVICE inline T block_sum(T value, T* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullWarp, value, offset);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : T(0);
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullWarp, value, offset);
  __syncthreads();  // every warp has read scratch before anyone writes it again
  return value;
}

// The maximum of `value` over the block's threads, in every thread (NaN is ignored, as by fmaxf;
// callers that must propagate it see it in their sums). Same conditions as block_sum.
DS_DEVICE inline float block_max(float value, float* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, offset));
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : -INFINITY;
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, offset));
  __syncthreads();
  return value;
}

}  // namespace ds::cuda
