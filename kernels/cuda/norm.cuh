// The gradient's health on the GPU, for clipping and fp16 loss scaling (formulas: runtime/amp's
// sum_squares and the engine's overflow check): Σ x² in double, and whether any element is inf or
// NaN. Two passes for the sum: each block's partial (a grid-stride loop, then block_sum), then one
// block adds the partials in order, so the result is the same run to run (not the CPU's order:
// within a few roundings of its double). Written in the CUDA subset: nvcc compiles it, the SIMT
// emulator runs it in the unit tests.
#pragma once
#include <math.h>

#include <cstdint>

#include "cuda/block_reduce.cuh"
#include "cuda/segments.h"

namespace ds::cuda {

// partial[blockIdx.x] = Σ x[i]² over this block's elements of x[n]; block.x a multiple of 32.
DS_KERNEL void sum_squares_partial_kernel(const float* x, int64_t n, double* partial) {
  DS_SHARED(double, scratch, 32);
  double sum = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = x[i];
    sum += v * v;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// Many tensors in one launch (segments.h): partial[b] = Σ x[i]² over blocks[b]'s part of its segment, then
// sum_partials_kernel over the blocks' partials. Grid: the blocks' count; block.x a multiple of 32.
DS_KERNEL void sum_squares_multi_kernel(const SquaresSegment* segments, const SegmentBlock* blocks, double* partial) {
  DS_SHARED(double, scratch, 32);
  const SegmentBlock b = blocks[blockIdx.x];
  const SquaresSegment s = segments[b.segment];
  const int64_t end = s.n - b.begin < kSegmentBlockElements ? s.n : b.begin + kSegmentBlockElements;
  double sum = 0.0;
  for (int64_t i = b.begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = s.x[i];
    sum += v * v;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// total[0] += Σ partial[0..count); one block, block.x a multiple of 32.
DS_KERNEL void sum_partials_kernel(const double* partial, int64_t count, double* total) {
  DS_SHARED(double, scratch, 32);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) total[0] += sum;
}

// flag[0] = 1 when some x[i], i < n, is inf or NaN (left as it is otherwise); any grid and block.
DS_KERNEL void nonfinite_kernel(const float* x, int64_t n, int32_t* flag) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (!isfinite(x[i])) flag[0] = 1;  // every writer writes the same value
}

}  // namespace ds::cuda
