// Causal self-attention on the GPU as batched GEMMs and row kernels (launch.h's attention_forward and
// attention_backward; the kernels: attention.cuh). Host code over the launchers, so the same sequence
// runs on the GPU (launch.cu, cuBLASLt) and on the emulator (launch_emulated.cpp, the CPU reference GEMM).
// Per group of `chunk` heads, with Q, K, V, dO [heads, T, D] in the workspace, and per query chunk c
// (query_chunk.h: the queries Q_c against the keys of their causal prefix, K_p and V_p), its scores
// S [heads, rows, width] in the workspace's block:
//   forward   S = Q_c·K_pᵀ/√D, P = causal softmax rows of S (stats kept), O_c = P·V_p
//   backward  S = Q_c·K_pᵀ/√D, P from the stats, dV_p += Pᵀ·dO_c, dP = dO_c·V_pᵀ,
//             dS = P∘(dP − rowsum(P∘dP)), dQ_c = dS·K_p/√D, dK_p += dSᵀ·Q_c/√D
// (backward takes the chunks last first: the last one's prefix is every key, so its dK and dV products
// overwrite, and the others add to a prefix of them). The rest of the causal mask, within a chunk's
// rows, is applied by the row kernels (P = 0 above the diagonal), so the products do (n + 1)/2n of the
// whole T×T's flops with n chunks, where a masked kernel needs half, at cuBLAS's rate. With 16-bit products
// (bf16 or fp16) each GEMM takes 16-bit copies of its operands and writes fp32: Q, K, V and dO made
// once by the conversion kernel; P and dS per group by the row kernels that form them, which write the
// 16-bit values themselves (the forward's and dS's fp32 values are not written at all).
// The fused kernel (flash_attention.cuh) replaces all of it where attention_kernel says so.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cuda/gemm.h"
#include "cuda/launch.h"
#include "cuda/launch_shape.h"

namespace ds::cuda {
namespace {

constexpr auto F32 = GemmType::F32;

// The workspace's parts, in floats: seven [B, H, T, D] arrays, then two blocks of
// chunk · attention_block_per_head(T) floats (a query chunk's S or P, and dP, [heads, rows, width]);
// with 16-bit products then the 16-bit copies: four [B, H, T, D] arrays (Q, K, V, dO) and one block
// (P, then dS).
struct Workspace {
  float *q, *k, *v, *o, *dq, *dk, *dv, *s, *dp;
  std::optional<amp::Half> products;
  uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr, *o16 = nullptr, *s16 = nullptr;
  Workspace(float* w, int64_t n, int64_t block, std::optional<amp::Half> products)
      : q(w), k(q + n), v(k + n), o(v + n), dq(o + n), dk(dq + n), dv(dk + n), s(dv + n), dp(s + block),
        products(products) {
    if (!products) return;
    q16 = reinterpret_cast<uint16_t*>(dp + block);
    k16 = q16 + n;
    v16 = k16 + n;
    o16 = v16 + n;
    s16 = o16 + n;
  }
  GemmType type() const { return products ? gemm_type(*products) : F32; }
  amp::Half half() const { return products.value_or(amp::Half::BF16); }  // (unread without products)
  size_t element_bytes() const { return products ? 2 : 4; }
};

// c[h][m, n] = alpha · op(a[h]) · op(b[h]) + beta · c[h] over `heads` heads, each operand's heads
// `stride_*` elements apart; a and b of `type`.
void per_head(const void* a, int64_t stride_a, const void* b, int64_t stride_b, float* c, int64_t stride_c, int64_t m,
              int64_t n, int64_t k, bool trans_a, bool trans_b, float alpha, float beta, int64_t heads, GemmType type,
              void* stream) {
  gemm(a, b, c, m, n, k, trans_a, trans_b, type, F32, alpha, beta, heads, stride_a, stride_b, stride_c, stream);
}

// The operand a product reads: x itself, or its 16-bit copy x16 (made now).
const void* operand(const Workspace& w, const float* x, uint16_t* x16, int64_t n, void* stream) {
  if (!w.products) return x;
  float_to_half(*w.products, x, x16, n, stream);
  return x16;
}

// q, k and v from qkv's interleaved rows into the workspace's [B, H, T, D] arrays.
void split_qkv(const float* qkv, const Workspace& w, int64_t B, int64_t T, int64_t H, int64_t D, void* stream) {
  const int64_t C = H * D;
  attention_rows_to_heads(qkv, 3 * C, w.q, B, T, H, D, stream);
  attention_rows_to_heads(qkv + C, 3 * C, w.k, B, T, H, D, stream);
  attention_rows_to_heads(qkv + 2 * C, 3 * C, w.v, B, T, H, D, stream);
}

bool fused(int64_t B, int64_t H, int64_t D, std::optional<amp::Half> products, std::optional<AttentionKernel> kernel) {
  if (kernel.value_or(attention_kernel(B, H, D, products)) == AttentionKernel::gemm) return false;
  if (!products || D > kFlashMaxHeadDim || B * H > kFlashMaxHeads)
    throw std::invalid_argument("attention: the fused kernel needs 16-bit products, D <= " +
                                std::to_string(kFlashMaxHeadDim) + " and B*H <= 65535 (D=" +
                                std::to_string(D) + ", B*H=" + std::to_string(B * H) + ")");
  return true;
}

// The heads per group: group_heads where given (1..attention_chunk_heads), else attention_chunk_heads.
int64_t heads_per_group(int64_t B, int64_t T, int64_t H, int64_t group_heads) {
  const int64_t most = attention_chunk_heads(B, T, H);
  if (group_heads == 0) return most;
  if (group_heads < 0 || group_heads > most)
    throw std::invalid_argument("attention: group_heads " + std::to_string(group_heads) + " is not in 1.." +
                                std::to_string(most));
  return group_heads;
}

}  // namespace

AttentionKernel attention_kernel(int64_t B, int64_t H, int64_t D, std::optional<amp::Half> products) {
  const char* env = std::getenv("DS_CUDA_ATTENTION");
  const std::string choice = env ? env : "";
  if (!choice.empty() && choice != "fused" && choice != "gemm")
    throw std::runtime_error("DS_CUDA_ATTENTION='" + choice + "': expected fused or gemm");
  const bool applies = products && D <= kFlashMaxHeadDim && B * H <= kFlashMaxHeads;
  return applies && choice == "fused" ? AttentionKernel::fused : AttentionKernel::gemm;
}

void attention_forward(const float* qkv, float* out, float* stats, float* workspace, int64_t B, int64_t T, int64_t H,
                       int64_t D, void* stream, std::optional<amp::Half> products, std::optional<AttentionKernel> kernel,
                       int64_t group_heads) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  if (fused(B, H, D, products, kernel)) return flash_attention_forward(qkv, out, stats, B, T, H, D, *products, stream);
  const int64_t C = H * D, n = B * T * C, heads = B * H, chunk = heads_per_group(B, T, H, group_heads);
  const Workspace w(workspace, n, chunk * attention_block_per_head(T), products);
  const GemmType type = w.type();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  split_qkv(qkv, w, B, T, H, D, stream);
  const auto* q = static_cast<const char*>(operand(w, w.q, w.q16, n, stream));
  const auto* k = static_cast<const char*>(operand(w, w.k, w.k16, n, stream));
  const auto* v = static_cast<const char*>(operand(w, w.v, w.v16, n, stream));
  const size_t elem = w.element_bytes();
  const int64_t HD = T * D, query_rows = attention_query_rows(T);  // a head's elements in [B, H, T, D]
  for (int64_t first = 0; first < heads; first += chunk) {
    const int64_t count = std::min(chunk, heads - first), at = first * HD;
    float* group_stats = stats + 2 * first * T;
    for (int64_t q0 = 0; q0 < T; q0 += query_rows) {
      const QueryChunk c{T, q0, std::min(query_rows, T - q0)};
      const int64_t R = c.rows, W = c.width();
      const size_t qc = static_cast<size_t>(at + q0 * D) * elem, kp = static_cast<size_t>(at) * elem;
      per_head(q + qc, HD, k + kp, HD, w.s, R * W, R, W, D, false, true, scale, 0.0f, count, type, stream);  // S
      attention_softmax_rows(w.s, group_stats, count, c, w.s16, w.half(), stream);  // P
      const void* p = w.products ? static_cast<const void*>(w.s16) : w.s;
      per_head(p, R * W, v + kp, HD, w.o + at + q0 * D, HD, R, D, W, false, false, 1.0f, 0.0f, count, type,
               stream);  // O_c = P·V_p
    }
  }
  attention_heads_to_rows(w.o, out, C, B, T, H, D, stream);
}

void attention_backward(const float* qkv, const float* out, const float* stats, const float* dout, float* dqkv,
                        float* workspace, int64_t B, int64_t T, int64_t H, int64_t D, void* stream,
                        std::optional<amp::Half> products, std::optional<AttentionKernel> kernel,
                        int64_t group_heads) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  if (fused(B, H, D, products, kernel)) {
    if (out == nullptr) throw std::invalid_argument("attention_backward: the fused kernel needs the forward's output");
    flash_attention_delta(out, dout, workspace, B, T, H, D, stream);  // Δ in the workspace
    flash_attention_backward_dq(qkv, stats, dout, workspace, dqkv, B, T, H, D, *products, stream);
    return flash_attention_backward_dkdv(qkv, stats, dout, workspace, dqkv, B, T, H, D, *products, stream);
  }
  const int64_t C = H * D, n = B * T * C, heads = B * H, chunk = heads_per_group(B, T, H, group_heads);
  const Workspace w(workspace, n, chunk * attention_block_per_head(T), products);
  const GemmType type = w.type();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  split_qkv(qkv, w, B, T, H, D, stream);
  attention_rows_to_heads(dout, C, w.o, B, T, H, D, stream);  // dO where forward kept O
  const auto* q = static_cast<const char*>(operand(w, w.q, w.q16, n, stream));
  const auto* k = static_cast<const char*>(operand(w, w.k, w.k16, n, stream));
  const auto* v = static_cast<const char*>(operand(w, w.v, w.v16, n, stream));
  const auto* dout_h = static_cast<const char*>(operand(w, w.o, w.o16, n, stream));
  const size_t elem = w.element_bytes();
  const int64_t HD = T * D, query_rows = attention_query_rows(T), last = (T - 1) / query_rows * query_rows;
  for (int64_t first = 0; first < heads; first += chunk) {
    const int64_t count = std::min(chunk, heads - first), at = first * HD;
    const float* group_stats = stats + 2 * first * T;
    for (int64_t q0 = last; q0 >= 0; q0 -= query_rows) {  // the last chunk first: its dK, dV cover every key
      const QueryChunk c{T, q0, std::min(query_rows, T - q0)};
      const int64_t R = c.rows, W = c.width();
      const float add = q0 == last ? 0.0f : 1.0f;
      const size_t qc = static_cast<size_t>(at + q0 * D) * elem, kp = static_cast<size_t>(at) * elem;
      per_head(q + qc, HD, k + kp, HD, w.s, R * W, R, W, D, false, true, scale, 0.0f, count, type, stream);  // S
      attention_probs_from_stats(w.s, group_stats, count, c, w.s16, w.half(), stream);  // P
      const void* p = w.products ? static_cast<const void*>(w.s16) : w.s;
      per_head(p, R * W, dout_h + qc, HD, w.dv + at, HD, W, D, R, true, false, 1.0f, add, count, type,
               stream);  // dV_p += Pᵀ·dO_c
      per_head(dout_h + qc, HD, v + kp, HD, w.dp, R * W, R, W, D, false, true, 1.0f, 0.0f, count, type,
               stream);  // dP = dO_c·V_pᵀ
      attention_softmax_backward(w.s, w.dp, count, c, w.s16, w.half(), stream);  // dS (over P's 16-bit copy)
      const void* ds = w.products ? static_cast<const void*>(w.s16) : w.dp;
      per_head(ds, R * W, k + kp, HD, w.dq + at + q0 * D, HD, R, D, W, false, false, scale, 0.0f, count, type,
               stream);  // dQ_c = dS·K_p/√D
      per_head(ds, R * W, q + qc, HD, w.dk + at, HD, W, D, R, true, false, scale, add, count, type,
               stream);  // dK_p += dSᵀ·Q_c/√D
    }
  }
  attention_heads_to_rows(w.dq, dqkv, 3 * C, B, T, H, D, stream);
  attention_heads_to_rows(w.dk, dqkv + C, 3 * C, B, T, H, D, stream);
  attention_heads_to_rows(w.dv, dqkv + 2 * C, 3 * C, B, T, H, D, stream);
}

}  // namespace ds::cuda
