// Token + position embedding, GPT-2's input layer:
//   out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]
// tokens [B, T] int32 in [0, vocab); wte [vocab, C]; wpe [≥T, C] (positions 0..T−1 are read);
// out, dout [B, T, C]; all row-major, contiguous, fp32.
// Backward scatters: dwte[tokens[b,t], :] += dout[b,t,:], dwpe[t, :] += dout[b,t,:] (ACCUMULATED, the
// plugin ABI's rule). The fast path adds in fp32 straight into dwte/dwpe, (b, t) in order: a token
// repeated n times costs n roundings, but the order is fixed, so it is deterministic. The
// reference sums each gradient row in double and rounds once.
// Every token is checked before anything is written: one outside [0, vocab) throws
// std::out_of_range naming its position (b, t) and value, and leaves out/dwte/dwpe untouched.
#pragma once
#include <cstdint>

namespace ds::cpu {

// out[B, T, C] from tokens[B, T], wte[vocab, C], wpe[T, C].
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out, int64_t B,
                       int64_t T, int64_t C, int64_t vocab);
void embedding_forward_reference(const int32_t* tokens, const float* wte, const float* wpe, float* out,
                                 int64_t B, int64_t T, int64_t C, int64_t vocab);

// dwte[vocab, C] and dwpe[T, C] (accumulated) from tokens[B, T] and dout[B, T, C]. vocab is only
// used to check the tokens (dwte is written at the token rows).
void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B,
                        int64_t T, int64_t C, int64_t vocab);
void embedding_backward_reference(const int32_t* tokens, const float* dout, float* dwte, float* dwpe,
                                  int64_t B, int64_t T, int64_t C, int64_t vocab);

}  // namespace ds::cpu
