// The element-wise optimizers with one state buffer on the GPU, over many fp32 tensors in one launch
// (segments.h): Lion (DeepSpeed's FusedLion: kernels/cpu/lion_element.h, the state its momentum), Adagrad
// (torch.optim.Adagrad: kernels/cpu/adagrad_element.h, the state its sum of squares) and plain RMSprop
// (torch.optim.RMSprop without momentum, not centered: kernels/cpu/rmsprop_element.h, the state square_avg). A block per 4096 elements
// of a tensor, each element through the CPU loop's own body, so a step gives the CPU's bits. Written in the CUDA
// subset: nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <cstdint>

#include "cpu/adagrad_element.h"
#include "cpu/lion_element.h"
#include "cpu/rmsprop_element.h"
#include "cuda/segments.h"
#include "simt/cuda_subset.h"

namespace ds::cuda {

// The element bodies as kernel arguments: update(param, grad, state).
struct LionUpdate {
  cpu::LionArgs a;
  DS_HD void operator()(float& param, float grad, float& momentum) const { cpu::lion_element(param, grad, momentum, a); }
};
struct AdagradUpdate {
  cpu::AdagradArgs a;
  DS_HD void operator()(float& param, float grad, float& sum) const { cpu::adagrad_element(param, grad, sum, a); }
};
struct RmspropUpdate {  // a.momentum 0, a.centered false: square_avg is the only state
  cpu::RmspropArgs a;
  DS_HD void operator()(float& param, float grad, float& square_avg) const {
    float unused_mean = 0.0f, unused_buf = 0.0f;
    cpu::rmsprop_element(param, grad, square_avg, unused_mean, unused_buf, a);
  }
};

// Block b updates blocks[b]'s part of its segment: p and s in place from g. Grid: the blocks' count; any block size.
template <class Update>
DS_KERNEL void one_state_multi_kernel(const OneStateSegment* segments, const SegmentBlock* blocks, Update update) {
  const SegmentBlock b = blocks[blockIdx.x];
  const OneStateSegment seg = segments[b.segment];
  const int64_t count = seg.n - b.begin < kSegmentBlockElements ? seg.n - b.begin : kSegmentBlockElements;
  float* p = seg.p + b.begin;
  float* s = seg.s + b.begin;
  const float* g = seg.g + b.begin;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    float param = p[i], state = s[i];
    update(param, g[i], state);
    p[i] = param;
    s[i] = state;
  }
}

}  // namespace ds::cuda
