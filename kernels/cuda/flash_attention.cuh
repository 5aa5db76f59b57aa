// Fused causal self-attention with 16-bit products on the tensor cores (flash attention): the scores
// never leave shared memory. Q, K, V and dO are rounded to bf16 or fp16 as they are loaded, P and dS
// as they are formed; every product accumulates in fp32 (nvcuda::wmma, 16x16x16); the softmax is fp32.
// The formulas, layouts and stats are kernels/cpu/attention.h's: qkv [B, T, 3, H, D] rows, out
// [B, T, H, D], stats [B, H, T, 2] = (m, log l) with P_tj = exp(s_tj − m_t − log l_t), s = q·k/√D.
//
// Each block has kFlashThreads threads (4 warps; the sizes: launch_shape.h) and one tile of kFlashRows rows of one head
// (grid: T/64 tiles × B·H heads); each warp owns 16 of the rows. D is padded with zeros to 16·DT
// columns (DT = 1..4, 6 or 8, so D ≤ 128). Causality skips the tiles above the diagonal.
//   forward     per query tile, over the key tiles up to it: S = Q·Kᵀ, the online softmax (m, l, O
//               rescaled by exp(m_old − m_new)), O += P·V; at the end O/l and the stats.
//   backward_dq per query tile, two passes over the key tiles: first Δ_t = Σ_j P_tj·dP_tj (dP =
//               dO·Vᵀ), then dS = P∘(dP − Δ) and dQ = dS·K/√D; writes dQ and Δ.
//   backward_dkdv per key tile, over the query tiles from it down: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, then
//               dV += Pᵀ·dO and dK += dSᵀ·Q/√D with Δ from backward_dq. Above D = 64 (DT > 4) the
//               dK and dV columns are split between two blocks (grid z), each forming Sᵀ and dPᵀ in
//               full: their accumulators would not fit a thread's 255 registers.
// Shared tiles' rows are padded by 16 bytes (launch_shape.h's strides), so that the rows a fragment
// loads or stores fall in different banks.
// No atomics: every sum has one order, so results are deterministic. The dQ kernel recomputes S and
// dP once more than a kernel that adds dQ with atomics would.
// Written in the CUDA subset (cuda_subset.h, cuda_mma.h): nvcc compiles it, the SIMT emulator runs it.
#pragma once
#include <math.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/block_reduce.cuh"
#include "cuda/convert.cuh"
#include "cuda/launch_shape.h"
#include "simt/cuda_mma.h"

namespace ds::cuda {

namespace flash {

namespace wmma = nvcuda::wmma;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <class Elem>
DS_HD constexpr amp::Half half_type() {
  return std::is_same<Elem, __half>::value ? amp::Half::F16 : amp::Half::BF16;
}

DS_DEVICE inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}
DS_DEVICE inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

// tile[r][d] (16·DT columns, row stride flash_half_ld(DT)) = half(src[(row0 + r)·stride + d]) for rows
// below T and d < D, zero elsewhere; by the whole block.
template <int DT>
DS_DEVICE inline void load_rows(amp::Half type, const float* src, int64_t stride, int64_t row0, int64_t T, int64_t D,
                                uint16_t* tile) {
  constexpr int Dp = 16 * DT;
  for (int i = threadIdx.x; i < kFlashRows * Dp; i += blockDim.x) {
    const int r = i / Dp, d = i % Dp;
    tile[r * flash_half_ld(DT) + d] = row0 + r < T && d < D ? to_half_bits(type, src[(row0 + r) * stride + d]) : uint16_t{0};
  }
}

// The warp's b operand tile (kk, nn) of B [16·KT, 16·NT]: B itself row-major (b[k·ldb + n]), or the
// transpose of a row-major X [16·NT, 16·KT] (B = Xᵀ, b[n·ldb + k]).
template <class Layout>
DS_DEVICE inline const uint16_t* b_tile(const uint16_t* b, unsigned ldb, int kk, int nn) {
  return std::is_same<Layout, wmma::row_major>::value ? b + kk * 16 * ldb + nn * 16 : b + nn * 16 * ldb + kk * 16;
}

// acc[nn] (+)= A·B over one warp: A [16, 16·KT] row-major 16-bit, B as b_tile; acc[nn] is columns
// [16·nn, 16·nn + 16) of the product.
template <class Elem, int KT, int NT, class Layout>
DS_DEVICE inline void warp_mma(Acc (&acc)[NT], const uint16_t* a, unsigned lda, const uint16_t* b, unsigned ldb) {
  DS_UNROLL
  for (int kk = 0; kk < KT; ++kk) {  // one a fragment live at a time (each acc[nn] still sums in k's order)
    wmma::fragment<wmma::matrix_a, 16, 16, 16, Elem, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, reinterpret_cast<const Elem*>(a + kk * 16), lda);
    DS_UNROLL
    for (int nn = 0; nn < NT; ++nn) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, Elem, Layout> fb;
      wmma::load_matrix_sync(fb, reinterpret_cast<const Elem*>(b_tile<Layout>(b, ldb, kk, nn)), ldb);
      wmma::mma_sync(acc[nn], fa, fb, acc[nn]);
    }
  }
}

// c [16, 16·NT] (fp32, row-major, ldc) = A·B over one warp; with `accumulate`, c += A·B.
template <class Elem, int KT, int NT, class Layout>
DS_DEVICE inline void warp_product(const uint16_t* a, unsigned lda, const uint16_t* b, unsigned ldb, float* c,
                                   unsigned ldc, bool accumulate) {
  Acc acc[NT];
  DS_UNROLL
  for (int nn = 0; nn < NT; ++nn) {
    if (accumulate) wmma::load_matrix_sync(acc[nn], c + nn * 16, ldc, wmma::mem_row_major);
    else wmma::fill_fragment(acc[nn], 0.0f);
  }
  warp_mma<Elem, KT, NT, Layout>(acc, a, lda, b, ldb);
  DS_UNROLL
  for (int nn = 0; nn < NT; ++nn) wmma::store_matrix_sync(c + nn * 16, acc[nn], ldc, wmma::mem_row_major);
}

// rows[(row0 + r)·stride + col0 + d] = scale · acc's [16, 16·NT] tile for rows below T and col0 + d < D,
// through the warp's fp32 scratch [16, kFlashRows], 4 column tiles at a time.
template <int NT>
DS_DEVICE inline void store_rows(const Acc (&acc)[NT], float* scratch, float scale, float* rows, int64_t stride,
                                 int64_t row0, int64_t T, int64_t col0, int64_t D) {
  constexpr int kGroup = kFlashRows / 16;
  const int lane = threadIdx.x % 32;
  DS_UNROLL
  for (int g = 0; g < NT; g += kGroup) {
    DS_UNROLL
    for (int nn = g; nn < NT && nn < g + kGroup; ++nn)
      wmma::store_matrix_sync(scratch + (nn - g) * 16, acc[nn], kFlashRows, wmma::mem_row_major);
    __syncwarp();
    // the group's columns (fewer than kFlashRows when NT is not a multiple of kGroup), up to D
    const int64_t c0 = col0 + 16 * g, group = 16 * (NT - g < kGroup ? NT - g : kGroup);
    const int64_t cols = D - c0 < group ? D - c0 : group;
    for (int r = 0; r < 16; ++r)
      if (row0 + r < T)
        for (int64_t d = lane; d < cols; d += 32)
          rows[(row0 + r) * stride + c0 + d] = scratch[r * kFlashRows + d] * scale;
    __syncwarp();
  }
}

}  // namespace flash

// Forward: grid (tiles, B·H), kFlashThreads threads, flash_forward_shared_bytes(DT) of shared memory.
template <class Elem, int DT>
DS_KERNEL void flash_forward_kernel(const float* qkv, float* out, float* stats, int64_t T, int64_t H, int64_t D,
                                    float scale) {
  namespace wmma = nvcuda::wmma;
  constexpr int R = kFlashRows, Dp = 16 * DT;
  constexpr int Lh = flash_half_ld(DT), Lp = kFlashProbLd, Ls = kFlashScoreLd, Lo = flash_out_ld(DT);  // row strides
  constexpr amp::Half type = flash::half_type<Elem>();
  DS_EXTERN_SHARED(float, shared);
  uint16_t* q = reinterpret_cast<uint16_t*>(shared);  // [R, Dp] each
  uint16_t* k = q + R * Lh;
  uint16_t* v = k + R * Lh;
  uint16_t* p = v + R * Lh;                         // [R, R]
  float* s = reinterpret_cast<float*>(p + R * Lp);  // [R, R]
  float* o = s + R * Ls;                            // [R, Dp]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile = gridDim.x - 1 - blockIdx.x;  // the longest tiles (the last rows) first
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, C = H * D, q0 = tile * R, row0 = q0 + warp * 16;
  const float* base = qkv + b * T * 3 * C + h * D;
  flash::load_rows<DT>(type, base, 3 * C, q0, T, D, q);
  for (int i = threadIdx.x; i < R * Lo; i += blockDim.x) o[i] = 0.0f;
  float* sw = s + warp * 16 * Ls;
  uint16_t* pw = p + warp * 16 * Lp;
  float* ow = o + warp * 16 * Lo;
  float m[16], l[16];  // the warp's rows' running max and sum, the same in every lane
  DS_UNROLL
  for (int r = 0; r < 16; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (int64_t kt = 0; kt <= tile; ++kt) {
    const int64_t k0 = kt * R;
    __syncthreads();  // k and v of the previous tile are read (and q and o are written, the first time)
    flash::load_rows<DT>(type, base + C, 3 * C, k0, T, D, k);
    flash::load_rows<DT>(type, base + 2 * C, 3 * C, k0, T, D, v);
    __syncthreads();
    flash::warp_product<Elem, DT, R / 16, wmma::col_major>(q + warp * 16 * Lh, Lh, k, Lh, sw, Ls, false);  // S = Q·Kᵀ
    __syncwarp();
    DS_UNROLL
    for (int r = 0; r < 16; ++r) {
      const int64_t t = row0 + r, c0 = k0 + lane, c1 = c0 + 32;
      const bool valid0 = t < T && c0 <= t, valid1 = t < T && c1 <= t;
      const float x0 = valid0 ? sw[r * Ls + lane] * scale : -INFINITY;
      const float x1 = valid1 ? sw[r * Ls + lane + 32] * scale : -INFINITY;
      const float m_new = fmaxf(m[r], flash::warp_max(fmaxf(x0, x1)));
      const float p0 = valid0 ? expf(x0 - m_new) : 0.0f, p1 = valid1 ? expf(x1 - m_new) : 0.0f;
      const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - m_new);
      l[r] = l[r] * alpha + flash::warp_sum(p0 + p1);
      m[r] = m_new;
      pw[r * Lp + lane] = to_half_bits(type, p0);
      pw[r * Lp + lane + 32] = to_half_bits(type, p1);
      for (int d = lane; d < Dp; d += 32) ow[r * Lo + d] *= alpha;
    }
    __syncwarp();
    flash::warp_product<Elem, R / 16, DT, wmma::row_major>(pw, Lp, v, Lh, ow, Lo, true);  // O += P·V
    __syncwarp();
  }
  DS_UNROLL
  for (int r = 0; r < 16; ++r) {
    const int64_t t = row0 + r;
    if (t >= T) continue;
    const float inv = 1.0f / l[r];
    for (int d = lane; d < D; d += 32) out[(b * T + t) * C + h * D + d] = ow[r * Lo + d] * inv;
    if (lane == 0) {
      stats[2 * (bh * T + t)] = m[r];
      stats[2 * (bh * T + t) + 1] = logf(l[r]);
    }
  }
}

// Backward, first kernel: dQ and Δ [B·H, T]. Grid and block as the forward's, flash_dq_shared_bytes(DT).
template <class Elem, int DT>
DS_KERNEL void flash_backward_dq_kernel(const float* qkv, const float* stats, const float* dout, float* dqkv,
                                        float* delta, int64_t T, int64_t H, int64_t D, float scale) {
  namespace wmma = nvcuda::wmma;
  constexpr int R = kFlashRows;
  constexpr int Lh = flash_half_ld(DT), Lp = kFlashProbLd, Ls = kFlashScoreLd;  // row strides
  constexpr amp::Half type = flash::half_type<Elem>();
  DS_EXTERN_SHARED(float, shared);
  uint16_t* q = reinterpret_cast<uint16_t*>(shared);  // [R, 16·DT] each
  uint16_t* dO = q + R * Lh;
  uint16_t* k = dO + R * Lh;
  uint16_t* v = k + R * Lh;
  uint16_t* ds = v + R * Lh;                         // [R, R]
  float* s = reinterpret_cast<float*>(ds + R * Lp);  // [R, R]
  float* dp = s + R * Ls;                            // [R, R]
  float* lse = dp + R * Ls;                          // [R] each: the rows' m + log l and Δ (shared memory
  float* di = lse + R;                              // rather than registers: dQ's take them above D = 64)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile = gridDim.x - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, C = H * D, q0 = tile * R, row0 = q0 + warp * 16;
  const float* base = qkv + b * T * 3 * C + h * D;
  flash::load_rows<DT>(type, base, 3 * C, q0, T, D, q);
  flash::load_rows<DT>(type, dout + b * T * C + h * D, C, q0, T, D, dO);
  float* sw = s + warp * 16 * Ls;
  float* dpw = dp + warp * 16 * Ls;
  uint16_t* dsw = ds + warp * 16 * Lp;
  float* lsew = lse + warp * 16;  // the warp's rows'
  float* diw = di + warp * 16;
  if (lane < 16) {
    const int64_t t = row0 + lane;
    lsew[lane] = t < T ? stats[2 * (bh * T + t)] + stats[2 * (bh * T + t) + 1] : 0.0f;
    diw[lane] = 0.0f;
  }
  __syncwarp();
  flash::Acc dq[DT];
  DS_UNROLL
  for (int nn = 0; nn < DT; ++nn) wmma::fill_fragment(dq[nn], 0.0f);
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t kt = 0; kt <= tile; ++kt) {
      const int64_t k0 = kt * R;
      __syncthreads();
      flash::load_rows<DT>(type, base + C, 3 * C, k0, T, D, k);
      flash::load_rows<DT>(type, base + 2 * C, 3 * C, k0, T, D, v);
      __syncthreads();
      flash::warp_product<Elem, DT, R / 16, wmma::col_major>(q + warp * 16 * Lh, Lh, k, Lh, sw, Ls, false);    // S
      flash::warp_product<Elem, DT, R / 16, wmma::col_major>(dO + warp * 16 * Lh, Lh, v, Lh, dpw, Ls, false);  // dP
      __syncwarp();
      for (int r = 0; r < 16; ++r) {
        const int64_t t = row0 + r;
        float sum = 0.0f;
        for (int c = lane; c < R; c += 32) {
          const bool valid = t < T && k0 + c <= t;
          const float pr = valid ? expf(sw[r * Ls + c] * scale - lsew[r]) : 0.0f;
          if (pass == 0) sum += pr * dpw[r * Ls + c];
          else dsw[r * Lp + c] = to_half_bits(type, pr * (dpw[r * Ls + c] - diw[r]));
        }
        if (pass == 0) {
          const float total = flash::warp_sum(sum);
          if (lane == 0) diw[r] += total;
        }
      }
      __syncwarp();
      if (pass == 1) flash::warp_mma<Elem, R / 16, DT, wmma::row_major>(dq, dsw, Lp, k, Lh);  // dQ += dS·K
      __syncwarp();
    }
  }
  flash::store_rows<DT>(dq, sw, scale, dqkv + b * T * 3 * C + h * D, 3 * C, row0, T, 0, D);
  if (lane < 16 && row0 + lane < T) delta[bh * T + row0 + lane] = diw[lane];
}

// Backward, second kernel: dK and dV, after backward_dq (its Δ). Grid (key tiles, B·H,
// kFlashDkdvSplits<DT>), kFlashThreads threads, flash_dkdv_shared_bytes(DT); block z accumulates
// the NT = DT / splits column tiles from 16·NT·z.
template <class Elem, int DT>
DS_KERNEL void flash_backward_dkdv_kernel(const float* qkv, const float* stats, const float* dout, const float* delta,
                                          float* dqkv, int64_t T, int64_t H, int64_t D, float scale) {
  namespace wmma = nvcuda::wmma;
  constexpr int R = kFlashRows;
  constexpr int Lh = flash_half_ld(DT), Lp = kFlashProbLd, Ls = kFlashScoreLd;  // row strides
  constexpr amp::Half type = flash::half_type<Elem>();
  DS_EXTERN_SHARED(float, shared);
  uint16_t* k = reinterpret_cast<uint16_t*>(shared);  // [R, 16·DT] each
  uint16_t* v = k + R * Lh;
  uint16_t* q = v + R * Lh;
  uint16_t* dO = q + R * Lh;
  uint16_t* p = dO + R * Lh;                         // [R, R] each: Pᵀ and dSᵀ, keys by queries
  uint16_t* ds = p + R * Lp;
  float* s = reinterpret_cast<float*>(ds + R * Lp);  // [R, R] each: Sᵀ and dPᵀ
  float* dp = s + R * Ls;
  float* lse = dp + R * Ls;  // [R] each, the query tile's
  float* di = lse + R;
  constexpr int NT = DT / kFlashDkdvSplits<DT>;
  const int64_t col0 = 16 * NT * blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tiles = gridDim.x, tile = blockIdx.x;  // the longest (the first keys) first
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, C = H * D, k0 = tile * R, key0 = k0 + warp * 16;
  const float* base = qkv + b * T * 3 * C + h * D;
  flash::load_rows<DT>(type, base + C, 3 * C, k0, T, D, k);
  flash::load_rows<DT>(type, base + 2 * C, 3 * C, k0, T, D, v);
  float* sw = s + warp * 16 * Ls;
  float* dpw = dp + warp * 16 * Ls;
  uint16_t* pw = p + warp * 16 * Lp;
  uint16_t* dsw = ds + warp * 16 * Lp;
  flash::Acc dk[NT], dv[NT];
  DS_UNROLL
  for (int nn = 0; nn < NT; ++nn) {
    wmma::fill_fragment(dk[nn], 0.0f);
    wmma::fill_fragment(dv[nn], 0.0f);
  }
  for (int64_t qt = tile; qt < tiles; ++qt) {
    const int64_t q0 = qt * R;
    __syncthreads();
    flash::load_rows<DT>(type, base, 3 * C, q0, T, D, q);
    flash::load_rows<DT>(type, dout + b * T * C + h * D, C, q0, T, D, dO);
    for (int i = threadIdx.x; i < R; i += blockDim.x) {
      const int64_t t = q0 + i;
      lse[i] = t < T ? stats[2 * (bh * T + t)] + stats[2 * (bh * T + t) + 1] : 0.0f;
      di[i] = t < T ? delta[bh * T + t] : 0.0f;
    }
    __syncthreads();
    flash::warp_product<Elem, DT, R / 16, wmma::col_major>(k + warp * 16 * Lh, Lh, q, Lh, sw, Ls, false);    // Sᵀ
    flash::warp_product<Elem, DT, R / 16, wmma::col_major>(v + warp * 16 * Lh, Lh, dO, Lh, dpw, Ls, false);  // dPᵀ
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      const int64_t key = key0 + r;
      for (int c = lane; c < R; c += 32) {
        const int64_t t = q0 + c;
        const bool valid = t < T && key <= t;
        const float pr = valid ? expf(sw[r * Ls + c] * scale - lse[c]) : 0.0f;
        pw[r * Lp + c] = to_half_bits(type, pr);
        dsw[r * Lp + c] = to_half_bits(type, pr * (dpw[r * Ls + c] - di[c]));
      }
    }
    __syncwarp();
    flash::warp_mma<Elem, R / 16, NT, wmma::row_major>(dv, pw, Lp, dO + col0, Lh);  // dV += Pᵀ·dO
    flash::warp_mma<Elem, R / 16, NT, wmma::row_major>(dk, dsw, Lp, q + col0, Lh);  // dK += dSᵀ·Q
  }
  float* rows = dqkv + b * T * 3 * C + h * D;
  flash::store_rows<NT>(dk, sw, scale, rows + C, 3 * C, key0, T, col0, D);
  flash::store_rows<NT>(dv, sw, 1.0f, rows + 2 * C, 3 * C, key0, T, col0, D);
}

// For the launchers: calls f(Elem{}, std::integral_constant<int, DT>{}) with the 16-bit type of `products`
// and D's column tiles (flash_column_tiles: 1..4, 6 or 8).
template <class F>
void with_flash_types(amp::Half products, int64_t D, F&& f) {
  const auto tiles = [&](auto elem) {
    switch (flash_column_tiles(D)) {
      case 1: return f(elem, std::integral_constant<int, 1>{});
      case 2: return f(elem, std::integral_constant<int, 2>{});
      case 3: return f(elem, std::integral_constant<int, 3>{});
      case 4: return f(elem, std::integral_constant<int, 4>{});
      case 6: return f(elem, std::integral_constant<int, 6>{});
      case 8: return f(elem, std::integral_constant<int, 8>{});
      default:
        throw std::invalid_argument("flash attention: head dimension " + std::to_string(D) + " above " +
                                    std::to_string(kFlashMaxHeadDim));
    }
  };
  if (products == amp::Half::BF16) tiles(__nv_bfloat16{});
  else tiles(__half{});
}

}  // namespace ds::cuda
