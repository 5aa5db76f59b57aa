// Causal multi-head self-attention on the GPU (formulas and layouts: kernels/cpu/attention.h), one
// block per row, no T×T matrix in memory:
//   forward      block (b, h, t): the scores s_tj = (q_t·k_j)·scale for j ≤ t into shared memory,
//                m_t = block_max, their exp(s − m_t) and its block_sum, then out_t[d] = Σ_j P_tj·v_j[d]
//                with threads over d; writes stats (m_t, l_t = log Σ) as the CPU does.
//   backward dq  block (b, h, t): P_tj recomputed from the stats, dP_tj = dout_t·v_j, the row's
//                Σ_j P_tj·dP_tj (block_sum, kept in rowdot[b, h, t] for the next kernel), dS_tj, then
//                dq_t[d] = scale·Σ_j dS_tj·k_j[d].
//   backward dkv block (b, h, j): P_tj and dS_tj for t ≥ j recomputed the same way (the same code, so
//                the same bits), then dv_j[d] = Σ_t P_tj·dout_t[d], dk_j[d] = scale·Σ_t dS_tj·q_t[d].
// Dot products and row sums in fp32 in a fixed order (deterministic; the CPU reference sums in
// double). Shared memory: one row of attention_row_floats(T) (T padded to a multiple of 4) forward,
// two backward (the launchers allow T ≤ 6144, 48 KiB).
// A first, simple kernel: correct at any shape, not yet fast (each thread reads whole k/v rows).
// Written in the CUDA subset: nvcc compiles it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <math.h>

#include <cstdint>

#include "cuda/attention_shape.h"
#include "cuda/block_reduce.cuh"

namespace ds::cuda {

// Where block `row` = (b·H + h)·T + t finds its rows in qkv [B, T, 3, H, D] (q_t, and k_0 / v_0, the
// others at multiples of `stride`) and in out/dout [B, T, H, D].
struct AttentionRow {
  int64_t t, stride;
  const float *q, *k0, *v0;
  int64_t out_offset;  // of row t, head h in [B, T, H, D]
  DS_HD AttentionRow(const float* qkv, int64_t row, int64_t T, int64_t H, int64_t D) {
    t = row % T;
    const int64_t bh = row / T, h = bh % H, b = bh / H, C = H * D;
    stride = 3 * C;
    q = qkv + (b * T + t) * stride + h * D;
    k0 = qkv + b * T * stride + C + h * D;
    v0 = k0 + C;
    out_offset = (b * T + t) * C + h * D;
  }
};

DS_HD inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// grid.x = B·H·T, block.x a multiple of 32, one row of dynamic shared memory. out [B, T, H, D],
// stats [B, H, T, 2].
DS_KERNEL void attention_forward_kernel(const float* qkv, float* out, float* stats, int64_t T, int64_t H, int64_t D,
                                        float scale) {
  DS_SHARED(float, scratch, 32);
  DS_EXTERN_SHARED(float, p);  // p[j], j ≤ t: the scores, then exp(s − m)
  const int64_t row = blockIdx.x;
  const AttentionRow r(qkv, row, T, H, D);
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= r.t; j += blockDim.x) {
    p[j] = dot(r.q, r.k0 + j * r.stride, D) * scale;
    m = fmaxf(m, p[j]);
  }
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= r.t; j += blockDim.x) {
    p[j] = expf(p[j] - m);
    sum += p[j];
  }
  sum = block_sum(sum, scratch);  // its barriers also publish p
  if (threadIdx.x == 0) {
    stats[2 * row] = m;
    stats[2 * row + 1] = logf(sum);
  }
  const float inv = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= r.t; ++j) acc += p[j] * r.v0[j * r.stride + d];
    out[r.out_offset + d] = acc * inv;
  }
}

// P_tj and dP_tj of query row `qr` and key j (both kernels of backward use this).
struct ProbAndGrad {
  float p, dp;
};
DS_HD inline ProbAndGrad prob_and_grad(const AttentionRow& qr, const float* stats_row, const float* dout_row, int64_t j,
                                       int64_t D, float scale) {
  const float s = dot(qr.q, qr.k0 + j * qr.stride, D) * scale;
  return {expf(s - stats_row[0] - stats_row[1]), dot(dout_row, qr.v0 + j * qr.stride, D)};
}

// Backward, dq part: grid.x = B·H·T, block.x a multiple of 32, two rows of dynamic shared memory.
// Writes dq of dqkv [B, T, 3, H, D] and rowdot [B, H, T].
DS_KERNEL void attention_backward_dq_kernel(const float* qkv, const float* stats, const float* dout, float* dqkv,
                                            float* rowdot, int64_t T, int64_t H, int64_t D, float scale) {
  DS_SHARED(float, scratch, 32);
  DS_EXTERN_SHARED(float, shared);  // P_tj at [j], dP_tj at [R + j], R = attention_row_floats(T)
  const int64_t row = blockIdx.x, R = attention_row_floats(T);
  const AttentionRow r(qkv, row, T, H, D);
  const float* dout_row = dout + r.out_offset;
  float partial = 0.0f;
  for (int64_t j = threadIdx.x; j <= r.t; j += blockDim.x) {
    const ProbAndGrad pg = prob_and_grad(r, stats + 2 * row, dout_row, j, D, scale);
    shared[j] = pg.p;
    shared[R + j] = pg.dp;
    partial += pg.p * pg.dp;
  }
  const float total = block_sum(partial, scratch);
  if (threadIdx.x == 0) rowdot[row] = total;
  for (int64_t j = threadIdx.x; j <= r.t; j += blockDim.x) shared[j] = shared[j] * (shared[R + j] - total);  // dS_tj
  __syncthreads();
  float* dq = dqkv + (r.q - qkv);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= r.t; ++j) acc += shared[j] * r.k0[j * r.stride + d];
    dq[d] = acc * scale;
  }
}

// Backward, dk and dv parts: grid.x = B·H·T (block (b, h, j)), block.x any, two rows of dynamic
// shared memory; reads rowdot from the dq kernel. Writes dk and dv of dqkv.
DS_KERNEL void attention_backward_dkv_kernel(const float* qkv, const float* stats, const float* dout,
                                             const float* rowdot, float* dqkv, int64_t T, int64_t H, int64_t D,
                                             float scale) {
  DS_EXTERN_SHARED(float, shared);  // P_tj at [t − j], dS_tj at [R + t − j], t ≥ j
  const int64_t key = blockIdx.x, j = key % T, first_row = key - j;  // block (b, h, 0)'s row
  const int64_t R = attention_row_floats(T);
  for (int64_t t = j + threadIdx.x; t < T; t += blockDim.x) {
    const int64_t row = first_row + t;
    const AttentionRow qr(qkv, row, T, H, D);
    const ProbAndGrad pg = prob_and_grad(qr, stats + 2 * row, dout + qr.out_offset, j, D, scale);
    shared[t - j] = pg.p;
    shared[R + t - j] = pg.p * (pg.dp - rowdot[row]);
  }
  __syncthreads();
  const AttentionRow kr(qkv, key, T, H, D);  // row j: its q is where k_j and v_j sit, minus C and 2·C
  const int64_t C = H * D;
  float* dk = dqkv + (kr.q - qkv) + C;
  float* dv = dk + C;
  const float* dout_j = dout + kr.out_offset;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc_v = 0.0f, acc_k = 0.0f;
    for (int64_t t = j; t < T; ++t) {
      acc_v += shared[t - j] * dout_j[(t - j) * C + d];
      acc_k += shared[R + t - j] * kr.q[(t - j) * kr.stride + d];
    }
    dv[d] = acc_v;
    dk[d] = acc_k * scale;
  }
}

}  // namespace ds::cuda
