// Adam/AdamW on the GPU: a grid-stride loop over fp32 parameters, gradients and moments, each
// element through the CPU loop's own body (runtime/optim/adam_element.h), so a step gives the CPU's
// bits. Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <cstdint>

#include "optim/adam_element.h"
#include "simt/cuda_subset.h"

namespace ds::cuda {

// p, m, v [n] updated in place from g [n]; any grid and block.
template <bool kDecoupled>
DS_KERNEL void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, optim::AdamArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float param = p[i], mi = m[i], vi = v[i];
    optim::adam_element<kDecoupled>(param, g[i], mi, vi, a);
    p[i] = param;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace ds::cuda
