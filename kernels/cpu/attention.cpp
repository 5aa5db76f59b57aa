// attention: causal multi-head self-attention forward/backward; sgemm fast path over blocks of
// query rows, (batch, head) pairs split over the kernel threads, and the scalar reference (see
// attention.h for the formulas and the workspace).
#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

constexpr int64_t kRowBlock = 64;  // query rows per block of the fast path

// Copies T rows of D floats, `stride` floats apart in `src`, into the contiguous panel dst[T, D].
void gather(const float* src, int64_t stride, float* dst, int64_t T, int64_t D) {
  for (int64_t t = 0; t < T; ++t) std::copy(src + t * stride, src + t * stride + D, dst + t * D);
}

// The inverse: the contiguous panel src[T, D] into T rows `stride` floats apart in `dst`.
void scatter(const float* src, float* dst, int64_t stride, int64_t T, int64_t D) {
  for (int64_t t = 0; t < T; ++t) std::copy(src + t * D, src + t * D + D, dst + t * stride);
}

// Where head h of batch b starts in qkv (part 0 = q, 1 = k, 2 = v); rows are 3·H·D floats apart.
int64_t qkv_offset(int64_t b, int64_t h, int64_t part, int64_t T, int64_t H, int64_t D) {
  return b * T * 3 * H * D + part * H * D + h * D;
}

// p[j] = e^((p[j]·scale − m) − l) for j < n (the exps of a softmax row, vectorised).
DS_KERNEL_CLONES void scaled_exp(float* p, int64_t n, float scale, float m, float l) {
  for (int64_t j = 0; j < n; ++j) p[j] = exp_approx((p[j] * scale - m) - l);
}

}  // namespace

size_t attention_workspace_floats(int64_t B, int64_t T, int64_t H, int64_t /*D*/) {
  return static_cast<size_t>(2 * B * H * T);
}

void attention_forward(const float* qkv, float* out, float* workspace, int64_t B, int64_t T, int64_t H,
                       int64_t D) {
  if (B <= 0 || T <= 0 || H <= 0) return;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t C = H * D;
  parallel_for(B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q(T * D), k(T * D), v(T * D), o(T * D), s(std::min(T, kRowBlock) * T);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      gather(qkv + qkv_offset(b, h, 0, T, H, D), 3 * C, q.data(), T, D);
      gather(qkv + qkv_offset(b, h, 1, T, H, D), 3 * C, k.data(), T, D);
      gather(qkv + qkv_offset(b, h, 2, T, H, D), 3 * C, v.data(), T, D);
      float* stats = workspace + bh * T * 2;
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(r0 + kRowBlock, T), rows = r1 - r0;
        // Scores of query rows r0..r1−1 against keys 0..r1−1: s[rows, r1].
        matmul(q.data() + r0 * D, k.data(), s.data(), rows, r1, D, false, true, false);
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t t = r0 + i;
          float* p = s.data() + i * r1;
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j <= t; ++j) {
            p[j] *= scale;
            m = p[j] > m ? p[j] : m;
          }
          scaled_exp(p, t + 1, 1.0f, m, 0.0f);
          double sum = 0.0;
          for (int64_t j = 0; j <= t; ++j) sum += p[j];
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j <= t; ++j) p[j] *= inv;
          std::fill(p + t + 1, p + r1, 0.0f);  // masked: keys after t
          stats[2 * t] = m;
          stats[2 * t + 1] = static_cast<float>(std::log(sum));
        }
        matmul(s.data(), v.data(), o.data() + r0 * D, rows, D, r1, false, false, false);
      }
      scatter(o.data(), out + b * T * C + h * D, C, T, D);
    }
  });
}

void attention_forward_reference(const float* qkv, float* out, float* workspace, int64_t B, int64_t T,
                                 int64_t H, int64_t D) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int64_t C = H * D;
  std::vector<double> s(T > 0 ? T : 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* q = qkv + qkv_offset(b, h, 0, T, H, D) + t * 3 * C;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= t; ++j) {
          const float* k = qkv + qkv_offset(b, h, 1, T, H, D) + j * 3 * C;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
          s[j] = dot * scale;
          if (s[j] > m) m = s[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[j] - m);
        for (int64_t j = 0; j <= t; ++j) s[j] = std::exp(s[j] - m) / sum;  // now the probabilities
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j <= t; ++j) acc += s[j] * qkv[qkv_offset(b, h, 2, T, H, D) + j * 3 * C + d];
          out[(b * T + t) * C + h * D + d] = static_cast<float>(acc);
        }
        workspace[((b * H + h) * T + t) * 2] = static_cast<float>(m);
        workspace[((b * H + h) * T + t) * 2 + 1] = static_cast<float>(std::log(sum));
      }
}

void attention_backward(const float* qkv, const float* workspace, const float* dout, float* dqkv, int64_t B,
                        int64_t T, int64_t H, int64_t D) {
  if (B <= 0 || T <= 0 || H <= 0) return;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t C = H * D;
  parallel_for(B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q(T * D), k(T * D), v(T * D), dout_h(T * D), dq(T * D), dk(T * D), dv(T * D);
    std::vector<float> p(std::min(T, kRowBlock) * T), dp(p.size());
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      gather(qkv + qkv_offset(b, h, 0, T, H, D), 3 * C, q.data(), T, D);
      gather(qkv + qkv_offset(b, h, 1, T, H, D), 3 * C, k.data(), T, D);
      gather(qkv + qkv_offset(b, h, 2, T, H, D), 3 * C, v.data(), T, D);
      gather(dout + b * T * C + h * D, C, dout_h.data(), T, D);
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      const float* stats = workspace + bh * T * 2;
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(r0 + kRowBlock, T), rows = r1 - r0;
        const float* q_blk = q.data() + r0 * D;
        const float* dout_blk = dout_h.data() + r0 * D;
        // P[rows, r1] recomputed from the scores and the saved (m, l); dP = dout·Vᵀ.
        matmul(q_blk, k.data(), p.data(), rows, r1, D, false, true, false);
        matmul(dout_blk, v.data(), dp.data(), rows, r1, D, false, true, false);
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t t = r0 + i;
          float* pr = p.data() + i * r1;
          float* dpr = dp.data() + i * r1;
          const float m = stats[2 * t], l = stats[2 * t + 1];
          scaled_exp(pr, t + 1, scale, m, l);
          double dot = 0.0;
          for (int64_t j = 0; j <= t; ++j) dot += static_cast<double>(pr[j]) * dpr[j];
          const float delta = static_cast<float>(dot);
          // dS·(1/√D), written over dP; masked entries are 0 in both P and dS.
          for (int64_t j = 0; j <= t; ++j) dpr[j] = pr[j] * (dpr[j] - delta) * scale;
          std::fill(pr + t + 1, pr + r1, 0.0f);
          std::fill(dpr + t + 1, dpr + r1, 0.0f);
        }
        matmul(p.data(), dout_blk, dv.data(), r1, D, rows, true, false, true);      // dV[0:r1] += Pᵀ·dout
        matmul(dp.data(), k.data(), dq.data() + r0 * D, rows, D, r1, false, false, false);  // dQ = dS·K
        matmul(dp.data(), q_blk, dk.data(), r1, D, rows, true, false, true);        // dK[0:r1] += dSᵀ·Q
      }
      scatter(dq.data(), dqkv + qkv_offset(b, h, 0, T, H, D), 3 * C, T, D);
      scatter(dk.data(), dqkv + qkv_offset(b, h, 1, T, H, D), 3 * C, T, D);
      scatter(dv.data(), dqkv + qkv_offset(b, h, 2, T, H, D), 3 * C, T, D);
    }
  });
}

void attention_backward_reference(const float* qkv, const float* workspace, const float* dout, float* dqkv,
                                  int64_t B, int64_t T, int64_t H, int64_t D) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int64_t C = H * D;
  const int64_t n = T > 0 ? T : 0;
  std::vector<double> p(n), dp(n), dq(n * D), dk(n * D), dv(n * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* q = qkv + qkv_offset(b, h, 0, T, H, D);
      const float* k = qkv + qkv_offset(b, h, 1, T, H, D);
      const float* v = qkv + qkv_offset(b, h, 2, T, H, D);
      std::fill(dq.begin(), dq.end(), 0.0);
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        const double m = workspace[((b * H + h) * T + t) * 2], l = workspace[((b * H + h) * T + t) * 2 + 1];
        const float* g = dout + (b * T + t) * C + h * D;
        double delta = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0.0, dg = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            dot += static_cast<double>(q[t * 3 * C + d]) * k[j * 3 * C + d];
            dg += static_cast<double>(g[d]) * v[j * 3 * C + d];
          }
          p[j] = std::exp(dot * scale - m - l);
          dp[j] = dg;
          delta += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          for (int64_t d = 0; d < D; ++d) {
            dv[j * D + d] += p[j] * g[d];
            dq[t * D + d] += ds * k[j * 3 * C + d];
            dk[j * D + d] += ds * q[t * 3 * C + d];
          }
        }
      }
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          dqkv[qkv_offset(b, h, 0, T, H, D) + t * 3 * C + d] = static_cast<float>(dq[t * D + d]);
          dqkv[qkv_offset(b, h, 1, T, H, D) + t * 3 * C + d] = static_cast<float>(dk[t * D + d]);
          dqkv[qkv_offset(b, h, 2, T, H, D) + t * 3 * C + d] = static_cast<float>(dv[t * D + d]);
        }
    }
}

}  // namespace ds::cpu
