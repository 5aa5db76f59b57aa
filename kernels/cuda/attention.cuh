// The element and row kernels of causal self-attention on the GPU (the whole: attention.cpp, which
// runs the products as batched cuBLASLt GEMMs between them; formulas and layouts: kernels/cpu/attention.h).
// Per (b, h) the head's rows live apart in [B, H, T, D] ("heads"); scores and probabilities in one
// query chunk's blocks (query_chunk.h: per head the chunk's queries against their causal prefix):
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
#include "cuda/query_chunk.h"

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
// (out16, in `type`, laid out as the fp32 ones): rounded as the conversion kernel rounds them, so the
// products see the same bits as from a separate conversion, one fewer pass over the scores.
// Each works on one query chunk's scores (query_chunk.h): blocks [heads, rows, width] of the chunk's
// causal prefix; QueryChunk{T, 0, T} is every row of [heads·T, T].

// Forward softmax of each causal row: grid.x = the chunk's rows (heads·rows), block.x a multiple of
// 32. scores [heads, rows, width] (already scaled by 1/√D); stats [heads·T, 2] = (m, l). P replaces
// the scores, or with out16 goes there only (the scores stay).
DS_KERNEL void softmax_rows_kernel(float* scores, float* stats, QueryChunk chunk, uint16_t* out16, amp::Half type) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x, t = chunk.query(row), width = chunk.width();
  float* s = scores + row * width;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, s[j]);
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(s[j] - m);
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const float p = j <= t ? expf(s[j] - m) * inv : 0.0f;
    if (out16 != nullptr) out16[row * width + j] = to_half_bits(type, p);
    else s[j] = p;
  }
  if (threadIdx.x == 0) {
    const int64_t at = chunk.stats_row(row);
    stats[2 * at] = m;
    stats[2 * at + 1] = logf(sum);
  }
}

// Backward: P from recomputed scores [heads, rows, width] and the forward's stats, in place, and with
// out16 in 16 bits there too; grid.x = the chunk's rows (heads·rows), any block (a row's index
// arithmetic once per thread, not one 64-bit division per element as an element-wise grid needs).
DS_KERNEL void probs_from_stats_kernel(float* scores, const float* stats, QueryChunk chunk, uint16_t* out16,
                                       amp::Half type) {
  const int64_t row = blockIdx.x, t = chunk.query(row), width = chunk.width(), at = chunk.stats_row(row);
  const float m = stats[2 * at], l = stats[2 * at + 1];
  float* s = scores + row * width;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    s[j] = j <= t ? expf(s[j] - m - l) : 0.0f;
    if (out16 != nullptr) out16[row * width + j] = to_half_bits(type, s[j]);
  }
}

// Backward softmax: dS from P and dP [heads, rows, width], replacing dP, or with out16 there only;
// grid.x = the chunk's rows, block.x a multiple of 32.
DS_KERNEL void softmax_backward_kernel(const float* probs, float* dprobs, QueryChunk chunk, uint16_t* out16,
                                       amp::Half type) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x, t = chunk.query(row), width = chunk.width();
  const float* p = probs + row * width;
  float* dp = dprobs + row * width;
  float partial = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) partial += p[j] * dp[j];
  const float total = block_sum(partial, scratch);
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const float ds = j <= t ? p[j] * (dp[j] - total) : 0.0f;
    if (out16 != nullptr) out16[row * width + j] = to_half_bits(type, ds);
    else dp[j] = ds;
  }
}

}  // namespace ds::cuda
