// embedding: token + position embedding forward (gather) and backward (scatter-add), fast path and
// scalar reference (see embedding.h). The fast paths split positions (forward) or embedding
// columns (backward, so no two threads add into the same gradient element) over the kernel threads.
#include "cpu/embedding.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/parallel.h"

namespace ds::cpu {
namespace {

void check_tokens(const int32_t* tokens, int64_t B, int64_t T, int64_t vocab) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t v = tokens[b * T + t];
      if (v < 0 || v >= vocab)
        throw std::out_of_range("embedding: token " + std::to_string(v) + " at position (b=" + std::to_string(b) +
                                ", t=" + std::to_string(t) + ") is not in [0, " + std::to_string(vocab) + ")");
    }
}

}  // namespace

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out, int64_t B,
                       int64_t T, int64_t C, int64_t vocab) {
  check_tokens(tokens, B, T, vocab);
  if (T <= 0 || C <= 0) return;
  parallel_for(B * T, min_rows_per_thread(C), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* __restrict e = wte + tokens[i] * C;
      const float* __restrict p = wpe + (i % T) * C;
      float* __restrict o = out + i * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  });
}

void embedding_forward_reference(const int32_t* tokens, const float* wte, const float* wpe, float* out,
                                 int64_t B, int64_t T, int64_t C, int64_t vocab) {
  check_tokens(tokens, B, T, vocab);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        out[(b * T + t) * C + c] = static_cast<float>(static_cast<double>(wte[tokens[b * T + t] * C + c]) +
                                                      static_cast<double>(wpe[t * C + c]));
}

void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B,
                        int64_t T, int64_t C, int64_t vocab) {
  check_tokens(tokens, B, T, vocab);
  if (B <= 0 || T <= 0) return;
  parallel_for(C, min_rows_per_thread(B * T), [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < B * T; ++i) {
      const float* __restrict g = dout + i * C;
      float* __restrict e = dwte + tokens[i] * C;
      float* __restrict p = dwpe + (i % T) * C;
      for (int64_t c = begin; c < end; ++c) {
        e[c] += g[c];
        p[c] += g[c];
      }
    }
  });
}

void embedding_backward_reference(const int32_t* tokens, const float* dout, float* dwte, float* dwpe,
                                  int64_t B, int64_t T, int64_t C, int64_t vocab) {
  check_tokens(tokens, B, T, vocab);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double sum = dwpe[t * C + c];
      for (int64_t b = 0; b < B; ++b) sum += dout[(b * T + t) * C + c];
      dwpe[t * C + c] = static_cast<float>(sum);
    }
  std::vector<double> sum(C);
  for (int64_t v = 0; v < vocab; ++v) {
    bool seen = false;
    for (int64_t i = 0; i < B * T; ++i) {
      if (tokens[i] != v) continue;
      if (!seen)
        for (int64_t c = 0; c < C; ++c) sum[c] = dwte[v * C + c];
      seen = true;
      for (int64_t c = 0; c < C; ++c) sum[c] += dout[i * C + c];
    }
    if (seen)
      for (int64_t c = 0; c < C; ++c) dwte[v * C + c] = static_cast<float>(sum[c]);
  }
}

}  // namespace ds::cpu
