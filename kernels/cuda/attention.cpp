// Causal self-attention on the GPU as batched GEMMs and row kernels (launch.h's attention_forward and
// attention_backward; the kernels: attention.cuh). Host code over the launchers, so the same sequence
// runs on the GPU (launch.cu, cuBLASLt) and on the emulator (launch_emulated.cpp, the CPU reference GEMM).
// Per group of `chunk` heads, with Q, K, V, dO [heads, T, D] and S [chunk, T, T] in the workspace:
//   forward   S = QKᵀ/√D, P = causal softmax rows of S (stats kept), O = P·V
//   backward  S = QKᵀ/√D, P from the stats, dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − rowsum(P∘dP)),
//             dQ = dS·K/√D, dK = dSᵀ·Q/√D
// The causal mask is applied by the row kernels (P = 0 above the diagonal), so the products run over
// whole T×T blocks: twice the flops a masked kernel needs, at cuBLAS's rate.
#include <cmath>

#include "cuda/gemm.h"
#include "cuda/launch.h"

namespace ds::cuda {
namespace {

constexpr auto F32 = GemmType::F32;

// The workspace's parts, in floats: seven [B, H, T, D] arrays, then two [chunk, T, T] blocks.
struct Workspace {
  float *q, *k, *v, *o, *dq, *dk, *dv, *s, *dp;
  Workspace(float* w, int64_t n, int64_t block)
      : q(w), k(q + n), v(k + n), o(v + n), dq(o + n), dk(dq + n), dv(dk + n), s(dv + n), dp(s + block) {}
};

// c[heads][m, n] = alpha · op(a) · op(b) over `heads` consecutive heads (contiguous per head).
void per_head(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
              float alpha, int64_t heads, void* stream) {
  gemm(a, b, c, m, n, k, trans_a, trans_b, F32, F32, alpha, 0.0f, heads, trans_a ? k * m : m * k,
       trans_b ? n * k : k * n, m * n, stream);
}

// q, k and v from qkv's interleaved rows into the workspace's [B, H, T, D] arrays.
void split_qkv(const float* qkv, const Workspace& w, int64_t B, int64_t T, int64_t H, int64_t D, void* stream) {
  const int64_t C = H * D;
  attention_rows_to_heads(qkv, 3 * C, w.q, B, T, H, D, stream);
  attention_rows_to_heads(qkv + C, 3 * C, w.k, B, T, H, D, stream);
  attention_rows_to_heads(qkv + 2 * C, 3 * C, w.v, B, T, H, D, stream);
}

}  // namespace

void attention_forward(const float* qkv, float* out, float* stats, float* workspace, int64_t B, int64_t T, int64_t H,
                       int64_t D, void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const int64_t C = H * D, n = B * T * C, heads = B * H, chunk = attention_chunk_heads(B, T, H);
  const Workspace w(workspace, n, chunk * T * T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  split_qkv(qkv, w, B, T, H, D, stream);
  for (int64_t first = 0; first < heads; first += chunk) {
    const int64_t count = std::min(chunk, heads - first), at = first * T * D;
    per_head(w.q + at, w.k + at, w.s, T, T, D, false, true, scale, count, stream);
    attention_softmax_rows(w.s, stats + 2 * first * T, count * T, T, stream);
    per_head(w.s, w.v + at, w.o + at, T, D, T, false, false, 1.0f, count, stream);
  }
  attention_heads_to_rows(w.o, out, C, B, T, H, D, stream);
}

void attention_backward(const float* qkv, const float* stats, const float* dout, float* dqkv, float* workspace,
                        int64_t B, int64_t T, int64_t H, int64_t D, void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const int64_t C = H * D, n = B * T * C, heads = B * H, chunk = attention_chunk_heads(B, T, H);
  const Workspace w(workspace, n, chunk * T * T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  split_qkv(qkv, w, B, T, H, D, stream);
  attention_rows_to_heads(dout, C, w.o, B, T, H, D, stream);  // dO where forward kept O
  for (int64_t first = 0; first < heads; first += chunk) {
    const int64_t count = std::min(chunk, heads - first), at = first * T * D;
    per_head(w.q + at, w.k + at, w.s, T, T, D, false, true, scale, count, stream);
    attention_probs_from_stats(w.s, stats + 2 * first * T, count * T, T, stream);
    per_head(w.s, w.o + at, w.dv + at, T, D, T, true, false, 1.0f, count, stream);   // dV = Pᵀ·dO
    per_head(w.o + at, w.v + at, w.dp, T, T, D, false, true, 1.0f, count, stream);   // dP = dO·Vᵀ
    attention_softmax_backward(w.s, w.dp, count * T, T, stream);                     // dP -> dS
    per_head(w.dp, w.k + at, w.dq + at, T, D, T, false, false, scale, count, stream);  // dQ = dS·K/√D
    per_head(w.dp, w.q + at, w.dk + at, T, D, T, true, false, scale, count, stream);   // dK = dSᵀ·Q/√D
  }
  attention_heads_to_rows(w.dq, dqkv, 3 * C, B, T, H, D, stream);
  attention_heads_to_rows(w.dk, dqkv + C, 3 * C, B, T, H, D, stream);
  attention_heads_to_rows(w.dv, dqkv + 2 * C, 3 * C, B, T, H, D, stream);
}

}  // namespace ds::cuda
