// The element and row kernels of causal self-attention on the GPU (the whole: attention.cpp, which
// runs the products as batched cuBLASLt GEMMs between them; formulas and layouts: kernels/cpu/attention.h).
// Per (b, h) the head's rows live apart in [B, H, T, D] ("heads"); scores and probabilities in
// [rows, T] blocks of T×T per head ("scores"), row t of head bh at (bh·T + t)·T:
//   rows_to_heads / heads_to_rows   qkv's or out's interleaved rows <-> [B, H, T, D]
//   softmax_rows        forward: m_t = max_{j≤t} s_tj, P_tj = exp(s_tj − m_t)/Σ, 0 for j > t;
//                       stats (m_t, l_t = log Σ), as the CPU keeps them
//   probs_from_stats    backward: P_tj = exp(s_tj − m_t − l_t) again from recomputed scores, 0 for j > t
//   softmax_backward    dS_tj = P_tj·(dP_tj − Σ_j' P_tj'·dP_tj') in place of dP
// (each also in 16 bits for the next product, below)
// Row sums in fp32 in a fixed order through block_sum (deterministic; the CPU sums in double).
// Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <math.h>

#include <cstdint>

#include "cuda/block_reduce.cuh"
#include "cuda/convert.cuh"

namespace ds::cuda {

// heads[b, h, t, d] = rows[(b·T + t)·row_stride + h·D + d] over heads [B, H, T, D]: one of q, k, v
// (row_stride 3·H·D, rows already offset by 0, H·D or 2·H·D) or out (row_stride H·D). Any grid and block.
DS_KERNEL void rows_to_heads_kernel(const float* rows, int64_t row_stride, float* heads, int64_t B, int64_t T,
                                    int64_t H, int64_t D) {
  const int64_t n = B * H * T * D, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t d = i % D, t = (i / D) % T, h = (i / (D * T)) % H, b = i / (D * T * H);
    heads[i] = rows[(b * T + t) * row_stride + h * D + d];
  }
}

// The inverse: rows[(b·T + t)·row_stride + h·D + d] = heads[b, h, t, d]. Any grid and block.
DS_KERNEL void heads_to_rows_kernel(const float* heads, float* rows, int64_t row_stride, int64_t B, int64_t T,
                                    int64_t H, int64_t D) {
  const int64_t n = B * H * T * D, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t d = i % D, t = (i / D) % T, h = (i / (D * T)) % H, b = i / (D * T * H);
    rows[(b * T + t) * row_stride + h * D + d] = heads[i];
  }
}

// With 16-bit products the kernels below also give the values the next product reads in 16 bits
// (out16, in `type`, [rows, T] as the fp32 ones): rounded as the conversion kernel rounds them, so the
// products see the same bits as from a separate conversion, one fewer pass over the T×T block.

// Forward softmax of each causal row: grid.x = the rows (heads·T), block.x a multiple of 32. scores
// [rows, T] (already scaled by 1/√D); stats [rows, 2] = (m, l). P replaces the scores, or with out16
// goes there only (the scores stay).
DS_KERNEL void softmax_rows_kernel(float* scores, float* stats, int64_t T, uint16_t* out16, amp::Half type) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x, t = row % T;
  float* s = scores + row * T;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, s[j]);
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(s[j] - m);
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float p = j <= t ? expf(s[j] - m) * inv : 0.0f;
    if (out16 != nullptr) out16[row * T + j] = to_half_bits(type, p);
    else s[j] = p;
  }
  if (threadIdx.x == 0) {
    stats[2 * row] = m;
    stats[2 * row + 1] = logf(sum);
  }
}

// Backward: P from recomputed scores and the forward's stats, in place over scores [rows, T], and with
// out16 in 16 bits there too; any grid and block.
DS_KERNEL void probs_from_stats_kernel(float* scores, const float* stats, int64_t rows, int64_t T, uint16_t* out16,
                                       amp::Half type) {
  const int64_t n = rows * T, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / T, j = i % T;
    scores[i] = j <= row % T ? expf(scores[i] - stats[2 * row] - stats[2 * row + 1]) : 0.0f;
    if (out16 != nullptr) out16[i] = to_half_bits(type, scores[i]);
  }
}

// Backward softmax: dS from P [rows, T] and dP [rows, T], replacing dP, or with out16 there only;
// grid.x = the rows, block.x a multiple of 32.
DS_KERNEL void softmax_backward_kernel(const float* probs, float* dprobs, int64_t T, uint16_t* out16,
                                       amp::Half type) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x, t = row % T;
  const float* p = probs + row * T;
  float* dp = dprobs + row * T;
  float partial = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) partial += p[j] * dp[j];
  const float total = block_sum(partial, scratch);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float ds = j <= t ? p[j] * (dp[j] - total) : 0.0f;
    if (out16 != nullptr) out16[row * T + j] = to_half_bits(type, ds);
    else dp[j] = ds;
  }
}

}  // namespace ds::cuda
