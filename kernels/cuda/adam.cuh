// Adam/AdamW on the GPU: a grid-stride loop over fp32 parameters, gradients and moments (one tensor, or
// many in one launch: segments.h), each
// element through the CPU loop's own body (kernels/cpu/adam_element.h), so a step gives the CPU's
// bits. When all four arrays are 16-byte aligned, each thread moves four elements per access
// (128-bit loads and stores, the width at which a GPU's memory system runs fastest), the last n % 4
// one at a time. Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it in the unit
// tests.
#pragma once
#include <cstdint>

#include "cpu/adam_element.h"
#include "cuda/segments.h"
#include "cuda/float4.cuh"
#include "simt/cuda_subset.h"

namespace ds::cuda {

// p, m, v [n] updated in place from g [n] by the threads numbered `first` of `stride`: four elements per
// access where all four arrays are 16-byte aligned, then the last n % 4 one at a time.
template <bool kDecoupled>
DS_DEVICE inline void adam_elements(float* p, const float* g, float* m, float* v, int64_t n, int64_t first,
                                    int64_t stride, const cpu::AdamArgs& a) {
  int64_t scalar_from = 0;
  if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
    auto* p4 = reinterpret_cast<Float4*>(p);
    auto* m4 = reinterpret_cast<Float4*>(m);
    auto* v4 = reinterpret_cast<Float4*>(v);
    const auto* g4 = reinterpret_cast<const Float4*>(g);
    for (int64_t i = first; i < n / 4; i += stride) {
      Float4 param = p4[i], mi = m4[i], vi = v4[i];
      const Float4 grad = g4[i];
      for (int j = 0; j < 4; ++j) cpu::adam_element<kDecoupled>(param.x[j], grad.x[j], mi.x[j], vi.x[j], a);
      p4[i] = param;
      m4[i] = mi;
      v4[i] = vi;
    }
    scalar_from = n / 4 * 4;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) {
    float param = p[i], mi = m[i], vi = v[i];
    cpu::adam_element<kDecoupled>(param, g[i], mi, vi, a);
    p[i] = param;
    m[i] = mi;
    v[i] = vi;
  }
}

// One tensor: p, m, v [n] updated in place from g [n]; any grid and block.
template <bool kDecoupled>
DS_KERNEL void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, cpu::AdamArgs a) {
  adam_elements<kDecoupled>(p, g, m, v, n, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                            static_cast<int64_t>(gridDim.x) * blockDim.x, a);
}

// Many tensors in one launch (segments.h): block b updates blocks[b]'s part of its segment. Grid:
// the blocks' count; any block size.
template <bool kDecoupled>
DS_KERNEL void adam_multi_kernel(const AdamSegment* segments, const SegmentBlock* blocks, cpu::AdamArgs a) {
  const SegmentBlock b = blocks[blockIdx.x];
  const AdamSegment s = segments[b.segment];
  const int64_t count = s.n - b.begin < kSegmentBlockElements ? s.n - b.begin : kSegmentBlockElements;
  adam_elements<kDecoupled>(s.p + b.begin, s.g + b.begin, s.m + b.begin, s.v + b.begin, count, threadIdx.x, blockDim.x,
                            a);
}

}  // namespace ds::cuda
