// Causal multi-head self-attention core: what sits between GPT-2's c_attn and c_proj Linears (the
// projections themselves are matmuls in the model).
//   qkv [B, T, 3, H, D]: the c_attn output [B, T, 3·C], C = H·D: q, then k, then v, each H heads of
//                        D (nanoGPT's split); out [B, T, H, D] = [B, T, C], heads concatenated.
// For each (b, h), with q_t, k_t, v_t ∈ R^D the head's rows at position t, and causal mask j ≤ t:
//   s_tj = (q_t · k_j)/√D,  m_t = max_{j≤t} s_tj,  l_t = log Σ_{j≤t} exp(s_tj − m_t)
//   P_tj = exp(s_tj − m_t − l_t),  out_t = Σ_{j≤t} P_tj·v_j
// Workspace: stats [B, H, T, 2] = (m_t, l_t), attention_workspace_floats() = 2·B·H·T floats, not
// the T×T probabilities per head: backward recomputes the scores from q and k (one more QKᵀ
// product: 5 products in backward instead of 4, ~1/6 more attention flops for O(T) memory per
// head instead of O(T²)). m and l are kept apart, as in cross_entropy, so large scores lose nothing.
// Backward (dqkv OVERWRITTEN, all three parts):
//   dP_tj = dout_t · v_j,   dv_j = Σ_{t≥j} P_tj·dout_t,   dS_tj = P_tj·(dP_tj − Σ_{j'≤t} P_tj'·dP_tj')
//   dq_t = (1/√D) Σ_{j≤t} dS_tj·k_j,   dk_j = (1/√D) Σ_{t≥j} dS_tj·q_t
// Fast path: per (b, h), the head's q, k, v (and dout) are copied into contiguous [T, D] panels and
// every product is an sgemm (ds::cpu::matmul) over blocks of 64 query rows; the block of rows
// r0..r1−1 multiplies only keys 0..r1−1, so the causal mask skips (n−1)/(2n) of the T×T work for
// n = T/64 blocks (3/8 at T = 256, nearly 1/2 for long T).
// Softmax: fp32 exp, row sums in double. Extra memory per call: O(T·D + 64·T) floats of scratch.
// Reference: plain loops over the causal range, every sum in double, rounded once.
// Deterministic for a fixed OpenBLAS core and thread count (like matmul).
// Non-finite values: NaN/inf propagate to the rows that attend to them. In the fast path, a
// non-finite k or v at position j can also reach the results for earlier positions of the same
// 64-row block (their masked weights are exact zeros, and 0·inf = NaN inside the sgemm); the loss
// is non-finite either way, so overflow detection is unaffected.
// Sizes: B, T, H ≥ 0, D ≥ 1.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ds::cpu {

// Floats of workspace that attention_forward fills and attention_backward reads: 2·B·H·T (D does
// not enter; it is taken so that every attention call passes the same four sizes).
size_t attention_workspace_floats(int64_t B, int64_t T, int64_t H, int64_t D);

// out[B, T, H, D] and workspace[B, H, T, 2] from qkv[B, T, 3, H, D].
void attention_forward(const float* qkv, float* out, float* workspace, int64_t B, int64_t T, int64_t H,
                       int64_t D);
void attention_forward_reference(const float* qkv, float* out, float* workspace, int64_t B, int64_t T,
                                 int64_t H, int64_t D);

// dqkv[B, T, 3, H, D] (overwritten) from qkv, the workspace written by forward, and dout[B, T, H, D].
void attention_backward(const float* qkv, const float* workspace, const float* dout, float* dqkv, int64_t B,
                        int64_t T, int64_t H, int64_t D);
void attention_backward_reference(const float* qkv, const float* workspace, const float* dout, float* dqkv,
                                  int64_t B, int64_t T, int64_t H, int64_t D);

}  // namespace ds::cpu
