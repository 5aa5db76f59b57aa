// Causal self-attention: fast (blocked sgemm) vs reference on odd shapes and across row-block
// boundaries, the causal mask, T = 1, overwrite semantics, determinism. (Gradients against
// central differences: tests/unit/backend/test_backend_ops.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cpu/attention.h"
#include "kernel_test_util.h"

using ds::test::Rng;

namespace {

struct Shape {
  int64_t B, T, H, D;
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) + " D=" + std::to_string(D);
  }
  size_t qkv() const { return static_cast<size_t>(B * T * 3 * H * D); }
  size_t out() const { return static_cast<size_t>(B * T * H * D); }
  size_t ws() const { return ds::cpu::attention_workspace_floats(B, T, H, D); }
};

std::vector<float> forward(const Shape& s, const std::vector<float>& qkv, std::vector<float>* ws = nullptr) {
  std::vector<float> out(s.out()), w(s.ws());
  ds::cpu::attention_forward(qkv.data(), out.data(), w.data(), s.B, s.T, s.H, s.D);
  if (ws) *ws = w;
  return out;
}

std::vector<float> forward_reference(const Shape& s, const std::vector<float>& qkv) {
  std::vector<float> out(s.out()), w(s.ws());
  ds::cpu::attention_forward_reference(qkv.data(), out.data(), w.data(), s.B, s.T, s.H, s.D);
  return out;
}

}  // namespace

TEST_CASE("attention workspace size") {
  CHECK(ds::cpu::attention_workspace_floats(2, 7, 3, 4) == 2 * 2 * 3 * 7);
  CHECK(ds::cpu::attention_workspace_floats(4, 256, 6, 64) == 2 * 4 * 6 * 256);
}

TEST_CASE("attention matches the reference") {
  // qkv in [-2, 2): scores up to ~4·√D, so the softmax is peaked, not uniform. A score is an fp32
  // sgemm dot of D products |q·k| ≤ 4, scaled by 1/√D: error ≤ es = 4·2e-7·(D+1)/√D (matmul's
  // bound). The stats (max score, log-sum) carry es plus ~1e-6 from the fp32 exps; out is a convex
  // combination of v rows (|v| < 2) whose weights carry ~2·es relative: atol 4·es + 2e-6,
  // rtol 1e-5. Gradients sum up to T products of O(1) values: atol 1e-5 + rtol 1e-4.
  Rng rng(71);
  const Shape shapes[] = {{1, 1, 1, 1},  {1, 7, 2, 5},  {2, 7, 3, 4},   {1, 64, 2, 8},
                          {2, 65, 1, 16}, {1, 130, 2, 64}, {1, 200, 3, 7}, {1, 33, 12, 64}};
  for (const auto& s : shapes) {
    const auto qkv = ds::test::random_vec(rng, s.qkv(), -2.0f, 2.0f);
    std::vector<float> out(s.out()), outr(s.out()), ws(s.ws()), wsr(s.ws());
    ds::cpu::attention_forward(qkv.data(), out.data(), ws.data(), s.B, s.T, s.H, s.D);
    ds::cpu::attention_forward_reference(qkv.data(), outr.data(), wsr.data(), s.B, s.T, s.H, s.D);
    const double es = 8e-7 * static_cast<double>(s.D + 1) / std::sqrt(static_cast<double>(s.D));
    ds::test::check_close("attention out " + s.str(), out.data(), outr.data(), out.size(), 4 * es + 2e-6, 1e-5);
    ds::test::check_close("attention stats " + s.str(), ws.data(), wsr.data(), ws.size(), es + 1e-6, 1e-6);

    const auto dout = ds::test::random_vec(rng, s.out());
    std::vector<float> d(s.qkv()), dr(s.qkv());
    ds::cpu::attention_backward(qkv.data(), ws.data(), dout.data(), d.data(), s.B, s.T, s.H, s.D);
    ds::cpu::attention_backward_reference(qkv.data(), wsr.data(), dout.data(), dr.data(), s.B, s.T, s.H, s.D);
    ds::test::check_close("attention dqkv " + s.str(), d.data(), dr.data(), d.size(), 1e-5, 1e-4);
  }
}

TEST_CASE("attention is causal") {
  // Changing q, k and v at positions ≥ t0 (in the middle of the second 64-row block) leaves the
  // outputs before t0 bit-identical, in both paths; the outputs from t0 on do change.
  Rng rng(73);
  const Shape s{2, 100, 2, 8};
  const int64_t t0 = 70, row = 3 * s.H * s.D;
  const auto qkv = ds::test::random_vec(rng, s.qkv());
  auto changed = qkv;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = (b * s.T + t0) * row; i < (b + 1) * s.T * row; ++i) changed[i] = rng.uniform(-1.0f, 1.0f);
  const auto o1 = forward(s, qkv), o2 = forward(s, changed);
  const auto r1 = forward_reference(s, qkv), r2 = forward_reference(s, changed);
  const int64_t C = s.H * s.D;
  for (int64_t b = 0; b < s.B; ++b) {
    auto slice = [&](const std::vector<float>& o, int64_t from, int64_t to) {
      return std::vector<float>(o.begin() + (b * s.T + from) * C, o.begin() + (b * s.T + to) * C);
    };
    CHECK(ds::test::bit_identical(slice(o1, 0, t0), slice(o2, 0, t0)));
    CHECK(ds::test::bit_identical(slice(r1, 0, t0), slice(r2, 0, t0)));
    CHECK(slice(o1, t0, t0 + 1) != slice(o2, t0, t0 + 1));
  }
}

TEST_CASE("attention with T = 1 returns v") {
  // One key: its probability is exactly 1, so out = v bit for bit, dv = dout, dq = dk = 0.
  Rng rng(74);
  const Shape s{3, 1, 4, 5};
  const int64_t C = s.H * s.D;
  const auto qkv = ds::test::random_vec(rng, s.qkv()), dout = ds::test::random_vec(rng, s.out());
  std::vector<float> ws;
  const auto out = forward(s, qkv, &ws), outr = forward_reference(s, qkv);
  std::vector<float> d(s.qkv());
  ds::cpu::attention_backward(qkv.data(), ws.data(), dout.data(), d.data(), s.B, s.T, s.H, s.D);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      CHECK(out[b * C + c] == qkv[b * 3 * C + 2 * C + c]);
      CHECK(outr[b * C + c] == qkv[b * 3 * C + 2 * C + c]);
      CHECK(d[b * 3 * C + c] == 0.0f);
      CHECK(d[b * 3 * C + C + c] == 0.0f);
      CHECK(d[b * 3 * C + 2 * C + c] == dout[b * C + c]);
    }
}

TEST_CASE("attention backward overwrites dqkv and is bit-identical run to run") {
  Rng rng(75);
  const Shape s{2, 97, 3, 16};
  const auto qkv = ds::test::random_vec(rng, s.qkv()), dout = ds::test::random_vec(rng, s.out());
  std::vector<float> ws1, ws2;
  const auto o1 = forward(s, qkv, &ws1), o2 = forward(s, qkv, &ws2);
  CHECK(ds::test::bit_identical(o1, o2));
  CHECK(ds::test::bit_identical(ws1, ws2));
  std::vector<float> d1(s.qkv()), d2(s.qkv(), std::numeric_limits<float>::quiet_NaN());
  ds::cpu::attention_backward(qkv.data(), ws1.data(), dout.data(), d1.data(), s.B, s.T, s.H, s.D);
  ds::cpu::attention_backward(qkv.data(), ws1.data(), dout.data(), d2.data(), s.B, s.T, s.H, s.D);
  CHECK(ds::test::bit_identical(d1, d2));
}
