// Lion on the GPU (DeepSpeed's FusedLion update: kernels/cpu/lion_element.h) over many fp32 tensors in one
// launch (segments.h): a block per 4096 elements of a tensor, each element through the CPU loop's own body, so
// a step gives the CPU's bits. Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it in the
// unit tests.
#pragma once
#include <cstdint>

#include "cpu/lion_element.h"
#include "cuda/segments.h"
#include "simt/cuda_subset.h"

namespace ds::cuda {

// Block b updates blocks[b]'s part of its segment: p and m in place from g. Grid: the blocks' count; any block size.
DS_KERNEL void lion_multi_kernel(const LionSegment* segments, const SegmentBlock* blocks, cpu::LionArgs a) {
  const SegmentBlock b = blocks[blockIdx.x];
  const LionSegment s = segments[b.segment];
  const int64_t count = s.n - b.begin < kSegmentBlockElements ? s.n - b.begin : kSegmentBlockElements;
  float* p = s.p + b.begin;
  float* m = s.m + b.begin;
  const float* g = s.g + b.begin;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    float param = p[i], momentum = m[i];
    cpu::lion_element(param, g[i], momentum, a);
    p[i] = param;
    m[i] = momentum;
  }
}

}  // namespace ds::cuda
