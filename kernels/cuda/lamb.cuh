// LAMB on the GPU over many tensors at once (segments.h: a table of the tensors and of blocks of
// kSegmentBlockElements of them), in two passes as the CPU's (kernels/cpu/sgd_lamb.h), each element through
// the CPU loops' own bodies (kernels/cpu/lamb_element.h):
//   lamb_moments_kernel: m and v updated in place from g, and each block's Σp² and Σu² in double (u from the
//                        updated moments); lamb_sums_kernel adds each tensor's blocks' sums;
//   lamb_apply_kernel:   p ← p − scale·u, with each tensor's scale = step size × the trust ratio the host forms
//                        from its sums (optim::lamb_trust_ratio, after summing them across ranks).
// The moments and u are the CPU's bits; the sums add in another order than the CPU's (within a few
// roundings of its double), so a trust ratio, and then a parameter, may differ in its last bit.
// Until 2026-11-29 these were per-tensor kernels: four launches per tensor (the moments, two sums, the update:
// 592 for GPT-2's 148 tensors).
// Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it.
#pragma once
#include <cstdint>

#include "cpu/lamb_element.h"
#include "cuda/block_reduce.cuh"
#include "cuda/segments.h"

namespace ds::cuda {

// Block b updates m and v of blocks[b]'s part of its segment from g, and writes that part's Σp² to
// partial[2b] and Σu² to partial[2b + 1]. Grid: the blocks' count; block.x a multiple of 32.
DS_KERNEL void lamb_moments_kernel(const LambSegment* segments, const SegmentBlock* blocks, cpu::LambArgs a,
                                   double* partial) {
  DS_SHARED(double, scratch, 32);
  const SegmentBlock b = blocks[blockIdx.x];
  const LambSegment s = segments[b.segment];
  const int64_t end = s.n - b.begin < kSegmentBlockElements ? s.n : b.begin + kSegmentBlockElements;
  double p_sq = 0.0, u_sq = 0.0;
  for (int64_t i = b.begin + threadIdx.x; i < end; i += blockDim.x) {
    float mi = s.m[i], vi = s.v[i];
    cpu::lamb_moments_element(s.g[i], mi, vi, a);
    s.m[i] = mi;
    s.v[i] = vi;
    const float param = s.p[i], u = cpu::lamb_update(param, mi, vi, a);
    p_sq += static_cast<double>(param) * param;
    u_sq += static_cast<double>(u) * u;
  }
  p_sq = block_sum(p_sq, scratch);
  u_sq = block_sum(u_sq, scratch);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = p_sq;
    partial[2 * blockIdx.x + 1] = u_sq;
  }
}

// sums[2s] = Σp² and sums[2s + 1] = Σu² of segment s = blockIdx.x: its blocks' partials, added in a fixed
// order. Grid: the segments' count; block.x a multiple of 32.
DS_KERNEL void lamb_sums_kernel(const LambSegment* segments, const double* partial, double* sums) {
  DS_SHARED(double, scratch, 32);
  const LambSegment s = segments[blockIdx.x];
  const int64_t count = (s.n + kSegmentBlockElements - 1) / kSegmentBlockElements;
  double p_sq = 0.0, u_sq = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    p_sq += partial[2 * (s.first_block + i)];
    u_sq += partial[2 * (s.first_block + i) + 1];
  }
  p_sq = block_sum(p_sq, scratch);
  u_sq = block_sum(u_sq, scratch);
  if (threadIdx.x == 0) {
    sums[2 * blockIdx.x] = p_sq;
    sums[2 * blockIdx.x + 1] = u_sq;
  }
}

// Block b moves blocks[b]'s part of its segment: p ← p − scales[segment]·u from the updated m and v. Grid:
// the blocks' count; any block size.
DS_KERNEL void lamb_apply_kernel(const LambSegment* segments, const SegmentBlock* blocks, cpu::LambArgs a,
                                 const float* scales) {
  const SegmentBlock b = blocks[blockIdx.x];
  const LambSegment s = segments[b.segment];
  const float scale = scales[b.segment];
  const int64_t end = s.n - b.begin < kSegmentBlockElements ? s.n : b.begin + kSegmentBlockElements;
  for (int64_t i = b.begin + threadIdx.x; i < end; i += blockDim.x) {
    const float param = s.p[i];
    s.p[i] = param - scale * cpu::lamb_update(param, s.m[i], s.v[i], a);
  }
}

}  // namespace ds::cuda
