// SGD on the GPU (torch.optim.SGD's update, with momentum, dampening, Nesterov and weight decay): a
// grid-stride loop over fp32 parameters, gradients and the momentum buffer (one tensor, or many in one
// launch: segments.h), each element through the CPU loops' own body (kernels/cpu/sgd_element.h), so a step gives the CPU's bits. Written in the CUDA subset:
// nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <cstdint>
#include <type_traits>

#include "cpu/sgd_element.h"
#include "cuda/segments.h"
#include "simt/cuda_subset.h"

namespace ds::cuda {

// p [n] (and buf [n] with kMomentum; unused without) updated in place from g [n] by the threads numbered
// `first` of `stride`.
template <bool kMomentum, bool kNesterov, bool kFirst>
DS_DEVICE inline void sgd_elements(float* p, const float* g, float* buf, int64_t n, int64_t first, int64_t stride,
                                   const cpu::SgdArgs& a) {
  for (int64_t i = first; i < n; i += stride) {
    float param = p[i], b = kMomentum && !kFirst ? buf[i] : 0.0f;
    cpu::sgd_element<kMomentum, kNesterov, kFirst>(param, g[i], b, a);
    p[i] = param;
    if (kMomentum) buf[i] = b;
  }
}

// One tensor; any grid and block.
template <bool kMomentum, bool kNesterov, bool kFirst>
DS_KERNEL void sgd_kernel(float* p, const float* g, float* buf, int64_t n, cpu::SgdArgs a) {
  sgd_elements<kMomentum, kNesterov, kFirst>(p, g, buf, n, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                             static_cast<int64_t>(gridDim.x) * blockDim.x, a);
}

// Many tensors in one launch (segments.h): block b updates blocks[b]'s part of its segment. Grid: the blocks'
// count; any block size.
template <bool kMomentum, bool kNesterov, bool kFirst>
DS_KERNEL void sgd_multi_kernel(const SgdSegment* segments, const SegmentBlock* blocks, cpu::SgdArgs a) {
  const SegmentBlock b = blocks[blockIdx.x];
  const SgdSegment s = segments[b.segment];
  const int64_t count = s.n - b.begin < kSegmentBlockElements ? s.n - b.begin : kSegmentBlockElements;
  sgd_elements<kMomentum, kNesterov, kFirst>(s.p + b.begin, s.g + b.begin, kMomentum ? s.buf + b.begin : nullptr,
                                             count, threadIdx.x, blockDim.x, a);
}

// Calls f(std::integral_constant<bool, kMomentum>, <kNesterov>, <kFirst>) as `a` asks (momentum 0: plain).
template <class F>
void with_sgd_kind(const cpu::SgdArgs& a, F&& f) {
  using T = std::true_type;
  using N = std::false_type;
  if (a.momentum == 0.0f) return f(N{}, N{}, N{});
  if (a.nesterov) return a.first ? f(T{}, T{}, T{}) : f(T{}, T{}, N{});
  return a.first ? f(T{}, N{}, T{}) : f(T{}, N{}, N{});
}

}  // namespace ds::cuda
