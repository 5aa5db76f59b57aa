// SGD on the GPU (torch.optim.SGD's update, with momentum, dampening, Nesterov and weight decay): a
// grid-stride loop over fp32 parameters, gradients and the momentum buffer, each element through the CPU
// loops' own body (kernels/cpu/sgd_element.h), so a step gives the CPU's bits. Written in the CUDA subset:
// nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <cstdint>
#include <type_traits>

#include "cpu/sgd_element.h"
#include "simt/cuda_subset.h"

namespace ds::cuda {

// p [n] (and buf [n] with kMomentum; unused without) updated in place from g [n]; any grid and block.
template <bool kMomentum, bool kNesterov, bool kFirst>
DS_KERNEL void sgd_kernel(float* p, const float* g, float* buf, int64_t n, cpu::SgdArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float param = p[i], b = kMomentum && !kFirst ? buf[i] : 0.0f;
    cpu::sgd_element<kMomentum, kNesterov, kFirst>(param, g[i], b, a);
    p[i] = param;
    if (kMomentum) buf[i] = b;
  }
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
