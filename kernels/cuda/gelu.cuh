// GELU forward and backward on the GPU (formulas: kernels/cpu/gelu.h): grid-stride loops over the
// CPU loops' own element bodies (kernels/cpu/gelu_element.h), with CUDA's expf for e^x. Written in
// the CUDA subset: nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <math.h>

#include <cstdint>

#include "cpu/gelu_element.h"
#include "simt/cuda_subset.h"

namespace ds::cuda {

struct Expf {
  DS_HD float operator()(float x) const { return expf(x); }
};

// y[i] = gelu(x[i]) for i < n; y may alias x. Any grid and block.
DS_KERNEL void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = cpu::gelu_forward_element(x[i], Expf{});
}

// dx[i] = dy[i]·gelu'(x[i]) for i < n; dx may alias dy. Any grid and block.
DS_KERNEL void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dx[i] = cpu::gelu_backward_element(x[i], dy[i], Expf{});
}

}  // namespace ds::cuda
