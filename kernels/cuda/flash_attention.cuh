// Fused causal self-attention with 16-bit products on the tensor cores (flash attention, in the manner of
// FlashAttention-2): the scores live in registers, never in memory. Q, K, V and dO are rounded to bf16 or
// fp16 as they are loaded into shared memory, P and dS as they are formed; every product accumulates in
// fp32 (mma_16816, whose register layout is documented: simt/mma_sync.h); the softmax is fp32. The
// formulas, layouts and stats are kernels/cpu/attention.h's: qkv [B, T, 3, H, D] rows, out [B, T, H, D],
// stats [B, H, T, 2] = (m, log l) with P_tj = exp(s_tj − m_t − log l_t), s = q·k/√D. Inside, the
// exponentials are base 2 (exp2 of s·log2(e)/√D), as the hardware's.
//
// Each block has kFlashThreads threads (4 warps; the sizes: launch_shape.h) and one tile of kFlashRows
// rows (queries or keys) of one head (grid: T/64 tiles × B·H heads); each warp owns 16 of the rows and
// works through the other side's tile 32 columns (a "chunk") at a time. D is padded with zeros to 16·DT
// columns (DT = 1..4, 6 or 8, so D ≤ 128). Causality skips the chunks above the diagonal.
//   forward     per query tile, over the key tiles up to it: S = Q·Kᵀ, the online softmax (m, l, O
//               rescaled by exp(m_old − m_new)), O += P·V with P straight from S's registers; at the end
//               O/l and the stats.
//   delta       per row, Δ_t = dO_t·O_t (FlashAttention-2's: equal to Σ_j P_tj·dP_tj, dP = dO·Vᵀ, in
//               D multiply-adds from the forward's output instead of a pass of products over the keys).
//   backward_dq per query tile, over the key tiles up to it: S = Q·Kᵀ, dP = dO·Vᵀ, dS = P∘(dP − Δ) and
//               dQ += dS·K/√D.
//   backward_dkdv per key tile, over the query tiles from it down: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, then
//               dV += Pᵀ·dO and dK += dSᵀ·Q/√D. Above D = 64 (DT > 4) the
//               dK and dV columns are split between two blocks (grid z), each forming Sᵀ and dPᵀ in
//               full, to bound a thread's registers.
// A warp's own A operand (its 16 rows of Q, dO, K or V) is loaded into registers once; the other side's
// tiles are in shared memory, row-major when a product reads their rows (K in Q·Kᵀ) and transposed too
// when it reads their columns (V in P·V), so that every operand register is one aligned 32-bit load.
// Rows are padded by 16 bytes (launch_shape.h's strides): the 8 rows a warp's loads touch fall in
// different banks.
// No atomics: every sum has one order, so results are deterministic. The dQ and dK/dV kernels each form S
// and dP, once more than a single kernel that adds dQ with atomics would.
// Written in the CUDA subset (cuda_subset.h, mma_sync.h): nvcc compiles it, the SIMT emulator runs it.
#pragma once
#include <math.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/block_reduce.cuh"
#include "cuda/convert.cuh"
#include "cuda/float4.cuh"
#include "cuda/launch_shape.h"
#include "simt/cuda_subset.h"
#include "simt/mma_sync.h"

namespace ds::cuda {

namespace flash {

constexpr int kChunk = 32;                       // columns a warp forms at a time
constexpr int kChunkTiles = kChunk / 8;          // its n-tiles of 8
constexpr float kLog2e = 1.4426950408889634f;    // log2(e)
constexpr float kLn2 = 0.6931471805599453f;      // ln(2)

// Every accumulator of a warp's n-tiles set to 0.
template <int N>
DS_DEVICE inline void zero(float (&acc)[N][4]) {
  DS_UNROLL
  for (int nt = 0; nt < N; ++nt) {
    DS_UNROLL
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  }
}

// Row t's log-sum-exp in base 2, (m + log l)·log2(e), from the forward's stats [B·H, T, 2]; 0 past the end.
DS_DEVICE inline float lse2_of(const float* stats, int64_t bh, int64_t T, int64_t t) {
  return t < T ? (stats[2 * (bh * T + t)] + stats[2 * (bh * T + t) + 1]) * kLog2e : 0.0f;
}

// tile[r·flash_half_ld(DT) + d] and tile_t[d·kFlashTransposedLd + r] (each where not null) =
// half(src[(row0 + r)·stride + d]) for rows below T and d < D, zero elsewhere, over kFlashRows rows and
// 16·DT columns; by the whole block (kFlashThreads threads). Where D, the stride and src allow 16-byte
// accesses (a multiple of 4 floats, aligned: GPT's heads), each thread loads its groups of 4 floats a batch of
// up to 8 at a time, every load of a batch issued before the first is used, so that a warp waits for memory
// once per batch rather than once per element; elsewhere one element at a time.
template <int DT>
DS_DEVICE inline void load_rows(amp::Half type, const float* src, int64_t stride, int64_t row0, int64_t T, int64_t D,
                                uint16_t* tile, uint16_t* tile_t) {
  constexpr int Dp = 16 * DT, kRowGroups = Dp / 4;
  constexpr int kGroups = kFlashRows * kRowGroups / static_cast<int>(kFlashThreads);  // per thread: 2·DT
  constexpr int kBatch = kGroups % 4 == 0 ? 4 : 2;  // at most 16 registers (kGroups = 2·DT)
  static_assert(kGroups % kBatch == 0, "whole batches");
  if (D % 4 == 0 && stride % 4 == 0 && aligned16(src)) {
    for (int first = 0; first < kGroups; first += kBatch) {
      Float4 v[kBatch];
      DS_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const int i = static_cast<int>(threadIdx.x) + (first + j) * static_cast<int>(kFlashThreads);
        const int r = i / kRowGroups, d = 4 * (i % kRowGroups);
        v[j] = row0 + r < T && d < D ? *reinterpret_cast<const Float4*>(src + (row0 + r) * stride + d) : Float4{};
      }
      DS_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const int i = static_cast<int>(threadIdx.x) + (first + j) * static_cast<int>(kFlashThreads);
        const int r = i / kRowGroups, d = 4 * (i % kRowGroups);
        if (tile) {
          uint16_t* at = tile + r * flash_half_ld(DT) + d;  // 8-byte aligned
          store_half2(at, pack_half2(type, v[j].x[0], v[j].x[1]));
          store_half2(at + 2, pack_half2(type, v[j].x[2], v[j].x[3]));
        }
        if (tile_t) {
          // Column d + e of the warp's groups lies 4 transposed rows (144 words) from the next group's: every
          // other group's in one bank. Each group starts at another of its 4 columns (group / 2 mod 4), so
          // that 8 groups share no bank: at D = 64 2-way conflicts instead of 8-way (16-way at 128: 4-way).
          const int turn = (i % kRowGroups) / 2;
          DS_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int col = (e + turn) % 4;  // selected, not indexed: v stays in registers
            const float x = col == 0 ? v[j].x[0] : col == 1 ? v[j].x[1] : col == 2 ? v[j].x[2] : v[j].x[3];
            tile_t[(d + col) * kFlashTransposedLd + r] = to_half_bits(type, x);
          }
        }
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < kFlashRows * Dp; i += blockDim.x) {
    const int r = i / Dp, d = i % Dp;
    const uint16_t h = row0 + r < T && d < D ? to_half_bits(type, src[(row0 + r) * stride + d]) : uint16_t{0};
    if (tile) tile[r * flash_half_ld(DT) + d] = h;
    if (tile_t) tile_t[d * kFlashTransposedLd + r] = h;
  }
}

// The warp's A operand: rows [row, row + 16) of a row-major 16-bit tile, DT k-steps of 16 columns.
template <int DT>
DS_DEVICE inline void load_a(uint32_t (&a)[DT][4], const uint16_t* tile, int row) {
  constexpr int L = flash_half_ld(DT);
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const uint16_t* p = tile + (row + g) * L + c;
  DS_UNROLL
  for (int kk = 0; kk < DT; ++kk) {
    a[kk][0] = load_half2(p + 16 * kk);
    a[kk][1] = load_half2(p + 8 * L + 16 * kk);
    a[kk][2] = load_half2(p + 16 * kk + 8);
    a[kk][3] = load_half2(p + 8 * L + 16 * kk + 8);
  }
}

// The B operand for k-step k0 and the 8 columns from n0, where B[k][n] = rows[n·ld + k] (B is the
// transpose of the row-major `rows`: Kᵀ in Q·Kᵀ, or a transposed tile's columns).
DS_DEVICE inline void load_b(uint32_t (&b)[2], const uint16_t* rows, int ld, int k0, int n0) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const uint16_t* p = rows + (n0 + g) * ld + k0 + c;
  b[0] = load_half2(p);
  b[1] = load_half2(p + 8);
}

// s[nt] = A·Bᵀ over the chunk of kChunk columns from n0 of the row-major tile `rows` (16·DT columns).
template <amp::Half type, int DT>
DS_DEVICE inline void chunk_product(float (&s)[kChunkTiles][4], const uint32_t (&a)[DT][4], const uint16_t* rows,
                                    int n0) {
  zero(s);
  DS_UNROLL
  for (int kk = 0; kk < DT; ++kk) {
    DS_UNROLL
    for (int nt = 0; nt < kChunkTiles; ++nt) {
      uint32_t b[2];
      load_b(b, rows, flash_half_ld(DT), 16 * kk, n0 + 8 * nt);
      mma_16816<type>(s[nt], a[kk], b);
    }
  }
}

// The chunk's [16, kChunk] values (s's accumulator layout) as the A operand of the next product: two
// k-steps of 16 (the accumulators of n-tiles 2j and 2j + 1 are exactly k-step j's registers).
template <amp::Half type>
DS_DEVICE inline void to_a(uint32_t (&a)[kChunk / 16][4], const float (&s)[kChunkTiles][4]) {
  DS_UNROLL
  for (int j = 0; j < kChunk / 16; ++j) {
    a[j][0] = pack_half2(type, s[2 * j][0], s[2 * j][1]);
    a[j][1] = pack_half2(type, s[2 * j][2], s[2 * j][3]);
    a[j][2] = pack_half2(type, s[2 * j + 1][0], s[2 * j + 1][1]);
    a[j][3] = pack_half2(type, s[2 * j + 1][2], s[2 * j + 1][3]);
  }
}

// acc[nt] += A·B for the NT8 n-tiles of 8 columns from n0, A the chunk's [16, kChunk] (to_a) and
// B[k][n] = transposed[n·kFlashTransposedLd + k0 + k]: the chunk's rows of a tile stored transposed.
template <amp::Half type, int NT8>
DS_DEVICE inline void accumulate(float (&acc)[NT8][4], const uint32_t (&a)[kChunk / 16][4], const uint16_t* transposed,
                                 int k0, int n0) {
  DS_UNROLL
  for (int j = 0; j < kChunk / 16; ++j) {
    DS_UNROLL
    for (int nt = 0; nt < NT8; ++nt) {
      uint32_t b[2];
      load_b(b, transposed, kFlashTransposedLd, k0 + 16 * j, n0 + 8 * nt);
      mma_16816<type>(acc[nt], a[j], b);
    }
  }
}

// The maximum and the sum over the 4 lanes that hold a row (lanes 4g .. 4g + 3).
DS_DEVICE inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullWarp, v, 2));
}
DS_DEVICE inline float quad_sum(float v) {
  v += __shfl_xor_sync(kFullWarp, v, 1);
  return v + __shfl_xor_sync(kFullWarp, v, 2);
}

// rows[(row0 + r)·stride + col0 + n] = scale · acc (the accumulator layout of NT8 n-tiles: the warp's 16
// rows from row0, 8·NT8 columns), for rows below T and col0 + n < D.
template <int NT8>
DS_DEVICE inline void store_rows(const float (&acc)[NT8][4], float scale, float* rows, int64_t stride, int64_t row0,
                                 int64_t T, int64_t col0, int64_t D) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  DS_UNROLL
  for (int nt = 0; nt < NT8; ++nt) {
    DS_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int64_t r = row0 + g + 8 * (i / 2), n = col0 + 8 * nt + c + i % 2;
      if (r < T && n < D) rows[r * stride + n] = acc[nt][i] * scale;
    }
  }
}

}  // namespace flash

// Forward: grid (tiles, B·H), kFlashThreads threads, flash_forward_shared_bytes(DT) of shared memory.
template <amp::Half type, int DT>
DS_KERNEL void flash_forward_kernel(const float* qkv, float* out, float* stats, int64_t T, int64_t H, int64_t D,
                                    float scale) {
  constexpr int R = kFlashRows, Lh = flash_half_ld(DT), NT8 = 2 * DT;
  DS_EXTERN_SHARED(float, shared);
  uint16_t* k = reinterpret_cast<uint16_t*>(shared);  // [R, Lh]: Q at first, then each key tile
  uint16_t* vt = k + R * Lh;                           // [16·DT, kFlashTransposedLd]: V transposed
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const int64_t tile = gridDim.x - 1 - blockIdx.x;  // the longest tiles (the last rows) first
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, C = H * D, q0 = tile * R, row0 = q0 + warp * 16;
  const float* base = qkv + b * T * 3 * C + h * D;
  const float scale2 = scale * flash::kLog2e;
  flash::load_rows<DT>(type, base, 3 * C, q0, T, D, k, nullptr);
  __syncthreads();
  uint32_t qa[DT][4];
  flash::load_a<DT>(qa, k, warp * 16);
  float o[NT8][4];
  flash::zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8: base-2 max, this lane's partial sum
  for (int64_t kt = 0; kt <= tile; ++kt) {
    __syncthreads();  // the previous tile (or Q) is read
    flash::load_rows<DT>(type, base + C, 3 * C, kt * R, T, D, k, nullptr);
    flash::load_rows<DT>(type, base + 2 * C, 3 * C, kt * R, T, D, nullptr, vt);
    __syncthreads();
    for (int chunk = 0; chunk < R / flash::kChunk; ++chunk) {
      const int64_t key0 = kt * R + chunk * flash::kChunk;
      if (key0 > row0 + 15) continue;  // above the diagonal for all of the warp's rows
      float s[flash::kChunkTiles][4];
      flash::chunk_product<type, DT>(s, qa, k, chunk * flash::kChunk);
      float top[2] = {m[0], m[1]};
      DS_UNROLL
      for (int nt = 0; nt < flash::kChunkTiles; ++nt) {
        DS_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int64_t row = row0 + g + 8 * (i / 2), key = key0 + 8 * nt + c + i % 2;
          s[nt][i] = key <= row ? s[nt][i] * scale2 : -INFINITY;
          top[i / 2] = fmaxf(top[i / 2], s[nt][i]);
        }
      }
      float alpha[2];
      DS_UNROLL
      for (int half = 0; half < 2; ++half) {  // key 0 is in every row's first chunk: the new max is finite
        top[half] = flash::quad_max(top[half]);
        alpha[half] = exp2f(m[half] - top[half]);
        m[half] = top[half];
        l[half] *= alpha[half];
      }
      DS_UNROLL
      for (int nt = 0; nt < flash::kChunkTiles; ++nt) {
        DS_UNROLL
        for (int i = 0; i < 4; ++i) {
          s[nt][i] = exp2f(s[nt][i] - m[i / 2]);  // 0 where masked
          l[i / 2] += s[nt][i];
        }
      }
      DS_UNROLL
      for (int nt = 0; nt < NT8; ++nt) {
        DS_UNROLL
        for (int i = 0; i < 4; ++i) o[nt][i] *= alpha[i / 2];
      }
      uint32_t pa[flash::kChunk / 16][4];
      flash::to_a<type>(pa, s);
      flash::accumulate<type, NT8>(o, pa, vt, chunk * flash::kChunk, 0);  // O += P·V
    }
  }
  float inv[2];
  DS_UNROLL
  for (int half = 0; half < 2; ++half) {
    l[half] = flash::quad_sum(l[half]);
    inv[half] = 1.0f / l[half];
    const int64_t t = row0 + g + 8 * half;
    if (c == 0 && t < T) {
      stats[2 * (bh * T + t)] = m[half] * flash::kLn2;
      stats[2 * (bh * T + t) + 1] = logf(l[half]);
    }
  }
  DS_UNROLL
  for (int nt = 0; nt < NT8; ++nt) {
    DS_UNROLL
    for (int i = 0; i < 4; ++i) o[nt][i] *= inv[i / 2];
  }
  flash::store_rows<NT8>(o, 1.0f, out + b * T * C + h * D, C, row0, T, 0, D);
}

// Backward, first kernel: Δ [B·H, T] from out and dout [B, T, H, D], in fp32. A warp per row (b, t, h), rows in
// that order: grid ⌈B·T·H / (kFlashThreads / 32)⌉, kFlashThreads threads.
DS_KERNEL void flash_delta_kernel(const float* out, const float* dout, float* delta, int64_t T, int64_t H, int64_t D,
                                  int64_t rows) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float sum = 0.0f;
  if (row < rows)
    for (int64_t d = lane; d < D; d += 32) sum += dout[row * D + d] * out[row * D + d];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullWarp, sum, offset);
  const int64_t b = row / (T * H), t = row / H % T, h = row % H;
  if (lane == 0 && row < rows) delta[(b * H + h) * T + t] = sum;
}

// Backward, second kernel: dQ, with Δ from flash_delta_kernel. Grid and block as the forward's,
// flash_dq_shared_bytes(DT).
template <amp::Half type, int DT>
DS_KERNEL void flash_backward_dq_kernel(const float* qkv, const float* stats, const float* dout, const float* delta,
                                        float* dqkv, int64_t T, int64_t H, int64_t D, float scale) {
  constexpr int R = kFlashRows, Lh = flash_half_ld(DT), NT8 = 2 * DT;
  DS_EXTERN_SHARED(float, shared);
  uint16_t* k = reinterpret_cast<uint16_t*>(shared);  // [R, Lh] each: Q and dO at first, then K and V
  uint16_t* v = k + R * Lh;
  uint16_t* kt_t = v + R * Lh;  // [16·DT, kFlashTransposedLd]: K transposed
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const int64_t tile = gridDim.x - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, C = H * D, q0 = tile * R, row0 = q0 + warp * 16;
  const float* base = qkv + b * T * 3 * C + h * D;
  const float scale2 = scale * flash::kLog2e;
  flash::load_rows<DT>(type, base, 3 * C, q0, T, D, k, nullptr);
  flash::load_rows<DT>(type, dout + b * T * C + h * D, C, q0, T, D, v, nullptr);
  __syncthreads();
  uint32_t qa[DT][4], da[DT][4];
  flash::load_a<DT>(qa, k, warp * 16);
  flash::load_a<DT>(da, v, warp * 16);
  float lse2[2], di[2];  // rows g and g + 8: (m + log l)·log2(e), and Δ
  DS_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t t = row0 + g + 8 * half;
    lse2[half] = flash::lse2_of(stats, bh, T, t);
    di[half] = t < T ? delta[bh * T + t] : 0.0f;
  }
  float dq[NT8][4];
  flash::zero(dq);
  for (int64_t kt = 0; kt <= tile; ++kt) {
    __syncthreads();
    flash::load_rows<DT>(type, base + C, 3 * C, kt * R, T, D, k, kt_t);
    flash::load_rows<DT>(type, base + 2 * C, 3 * C, kt * R, T, D, v, nullptr);
    __syncthreads();
    for (int chunk = 0; chunk < R / flash::kChunk; ++chunk) {
      const int64_t key0 = kt * R + chunk * flash::kChunk;
      if (key0 > row0 + 15) continue;
      float s[flash::kChunkTiles][4], dp[flash::kChunkTiles][4];
      flash::chunk_product<type, DT>(s, qa, k, chunk * flash::kChunk);   // S
      flash::chunk_product<type, DT>(dp, da, v, chunk * flash::kChunk);  // dP = dO·Vᵀ
      DS_UNROLL
      for (int nt = 0; nt < flash::kChunkTiles; ++nt) {
        DS_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int64_t row = row0 + g + 8 * (i / 2), key = key0 + 8 * nt + c + i % 2;
          const float p = key <= row && row < T ? exp2f(s[nt][i] * scale2 - lse2[i / 2]) : 0.0f;
          s[nt][i] = p * (dp[nt][i] - di[i / 2]);  // dS
        }
      }
      uint32_t dsa[flash::kChunk / 16][4];
      flash::to_a<type>(dsa, s);
      flash::accumulate<type, NT8>(dq, dsa, kt_t, chunk * flash::kChunk, 0);  // dQ += dS·K
    }
  }
  flash::store_rows<NT8>(dq, scale, dqkv + b * T * 3 * C + h * D, 3 * C, row0, T, 0, D);
}

// Backward, third kernel: dK and dV, with Δ from flash_delta_kernel. Grid (key tiles, B·H,
// kFlashDkdvSplits<DT>), kFlashThreads threads, flash_dkdv_shared_bytes(DT); block z accumulates
// the 16·DT / splits columns from 16·DT / splits·z.
template <amp::Half type, int DT>
DS_KERNEL void flash_backward_dkdv_kernel(const float* qkv, const float* stats, const float* dout, const float* delta,
                                          float* dqkv, int64_t T, int64_t H, int64_t D, float scale) {
  constexpr int R = kFlashRows, Lh = flash_half_ld(DT), Lt = kFlashTransposedLd;
  constexpr int NT8 = 2 * DT / kFlashDkdvSplits<DT>;  // n-tiles of 8 columns this block accumulates
  DS_EXTERN_SHARED(float, shared);
  uint16_t* q = reinterpret_cast<uint16_t*>(shared);  // [R, Lh] each: K and V at first, then Q and dO
  uint16_t* dO = q + R * Lh;
  uint16_t* q_t = dO + R * Lh;  // [16·DT, Lt] each: Q and dO transposed
  uint16_t* dO_t = q_t + 16 * DT * Lt;
  float* lse2 = reinterpret_cast<float*>(dO_t + 16 * DT * Lt);  // [R] each, the query tile's
  float* di = lse2 + R;
  const int col0 = 8 * NT8 * static_cast<int>(blockIdx.z);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const int64_t tiles = gridDim.x, tile = blockIdx.x;  // the longest (the first keys) first
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, C = H * D, k0 = tile * R, key0 = k0 + warp * 16;
  const float* base = qkv + b * T * 3 * C + h * D;
  const float scale2 = scale * flash::kLog2e;
  flash::load_rows<DT>(type, base + C, 3 * C, k0, T, D, q, nullptr);
  flash::load_rows<DT>(type, base + 2 * C, 3 * C, k0, T, D, dO, nullptr);
  __syncthreads();
  uint32_t ka[DT][4], va[DT][4];
  flash::load_a<DT>(ka, q, warp * 16);
  flash::load_a<DT>(va, dO, warp * 16);
  float dk[NT8][4], dv[NT8][4];
  flash::zero(dk);
  flash::zero(dv);
  for (int64_t qt = tile; qt < tiles; ++qt) {
    const int64_t q0 = qt * R;
    __syncthreads();
    flash::load_rows<DT>(type, base, 3 * C, q0, T, D, q, q_t);
    flash::load_rows<DT>(type, dout + b * T * C + h * D, C, q0, T, D, dO, dO_t);
    for (int i = threadIdx.x; i < R; i += blockDim.x) {
      const int64_t t = q0 + i;
      lse2[i] = flash::lse2_of(stats, bh, T, t);
      di[i] = t < T ? delta[bh * T + t] : 0.0f;
    }
    __syncthreads();
    for (int chunk = 0; chunk < R / flash::kChunk; ++chunk) {
      const int first = chunk * flash::kChunk;
      if (q0 + first + flash::kChunk - 1 < key0) continue;  // every query of the chunk before the warp's keys
      float st[flash::kChunkTiles][4], dpt[flash::kChunkTiles][4];
      flash::chunk_product<type, DT>(st, ka, q, first);    // Sᵀ = K·Qᵀ
      flash::chunk_product<type, DT>(dpt, va, dO, first);  // dPᵀ = V·dOᵀ
      DS_UNROLL
      for (int nt = 0; nt < flash::kChunkTiles; ++nt) {
        DS_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int j = first + 8 * nt + c + i % 2;  // the query, in the tile
          const int64_t key = key0 + g + 8 * (i / 2), t = q0 + j;
          const float p = key <= t && t < T ? exp2f(st[nt][i] * scale2 - lse2[j]) : 0.0f;
          st[nt][i] = p;                         // Pᵀ
          dpt[nt][i] = p * (dpt[nt][i] - di[j]);  // dSᵀ
        }
      }
      uint32_t pa[flash::kChunk / 16][4], dsa[flash::kChunk / 16][4];
      flash::to_a<type>(pa, st);
      flash::to_a<type>(dsa, dpt);
      flash::accumulate<type, NT8>(dv, pa, dO_t, first, col0);  // dV += Pᵀ·dO
      flash::accumulate<type, NT8>(dk, dsa, q_t, first, col0);  // dK += dSᵀ·Q
    }
  }
  float* rows = dqkv + b * T * 3 * C + h * D;
  flash::store_rows<NT8>(dk, scale, rows + C, 3 * C, key0, T, col0, D);
  flash::store_rows<NT8>(dv, 1.0f, rows + 2 * C, 3 * C, key0, T, col0, D);
}

// For the launchers: calls f(std::integral_constant<amp::Half, products>{}, std::integral_constant<int, DT>{})
// with D's column tiles (flash_column_tiles: 1..4, 6 or 8).
template <class F>
void with_flash_types(amp::Half products, int64_t D, F&& f) {
  const auto tiles = [&](auto type) {
    switch (flash_column_tiles(D)) {
      case 1: return f(type, std::integral_constant<int, 1>{});
      case 2: return f(type, std::integral_constant<int, 2>{});
      case 3: return f(type, std::integral_constant<int, 3>{});
      case 4: return f(type, std::integral_constant<int, 4>{});
      case 6: return f(type, std::integral_constant<int, 6>{});
      case 8: return f(type, std::integral_constant<int, 8>{});
      default:
        throw std::invalid_argument("flash attention: head dimension " + std::to_string(D) + " above " +
                                    std::to_string(kFlashMaxHeadDim));
    }
  };
  if (products == amp::Half::BF16) tiles(std::integral_constant<amp::Half, amp::Half::BF16>{});
  else tiles(std::integral_constant<amp::Half, amp::Half::F16>{});
}

}  // namespace ds::cuda
