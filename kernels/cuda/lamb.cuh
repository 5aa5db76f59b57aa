// LAMB on the GPU, per tensor in two passes as the CPU's (kernels/cpu/sgd_lamb.h), each element through
// the CPU loops' own bodies (kernels/cpu/lamb_element.h):
//   lamb_moments_kernel: m and v updated in place from g, and this block's Σp² and Σu² in double (u from
//                        the updated moments), for sum_partials_kernel (norm.cuh) to add in order;
//   lamb_apply_kernel:   p ← p − scale·u, with scale = step size × the trust ratio the host forms from the
//                        sums (optim::lamb_trust_ratio, after summing them across ranks).
// The moments and u are the CPU's bits; the sums add in another order than the CPU's (within a few
// roundings of its double), so a trust ratio, and then a parameter, may differ in its last bit.
// Grid-stride loops over fp32 arrays. Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it.
#pragma once
#include <cstdint>

#include "cpu/lamb_element.h"
#include "cuda/block_reduce.cuh"

namespace ds::cuda {

// m, v [n] updated from g [n]; partial[blockIdx.x] = Σp² and partial[gridDim.x + blockIdx.x] = Σu² over
// this block's elements. block.x a multiple of 32.
DS_KERNEL void lamb_moments_kernel(const float* p, const float* g, float* m, float* v, int64_t n, cpu::LambArgs a,
                                   double* partial) {
  DS_SHARED(double, scratch, 32);
  double p_sq = 0.0, u_sq = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float mi = m[i], vi = v[i];
    cpu::lamb_moments_element(g[i], mi, vi, a);
    m[i] = mi;
    v[i] = vi;
    const float param = p[i], u = cpu::lamb_update(param, mi, vi, a);
    p_sq += static_cast<double>(param) * param;
    u_sq += static_cast<double>(u) * u;
  }
  p_sq = block_sum(p_sq, scratch);
  u_sq = block_sum(u_sq, scratch);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = p_sq;
    partial[gridDim.x + blockIdx.x] = u_sq;
  }
}

// p [n] ← p − scale·u from the updated m and v [n]; any grid and block.
DS_KERNEL void lamb_apply_kernel(float* p, const float* m, const float* v, int64_t n, cpu::LambArgs a, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float param = p[i];
    p[i] = param - scale * cpu::lamb_update(param, m[i], v[i], a);
  }
}

}  // namespace ds::cuda
