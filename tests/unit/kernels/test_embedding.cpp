// Token + position embedding: fast vs reference (repeated tokens), bad tokens (message, nothing
// written), accumulation, determinism. (Gradients against central differences:
// tests/unit/backend/test_backend_ops.cpp.)
#include <doctest/doctest.h>

#include <stdexcept>

#include "cpu/embedding.h"
#include "kernel_test_util.h"

using ds::test::Rng;

namespace {

std::vector<int32_t> random_tokens(Rng& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(rng.below(vocab));
  return t;
}

}  // namespace

TEST_CASE("embedding matches the reference") {
  // Forward is one fp32 add per element: bit-exact. Backward: a small vocab makes tokens repeat,
  // so the fast path's fp32 accumulation (one rounding per occurrence, up to B·T of them) is
  // compared with the reference's double sums under atol 2e-7·(B·T + 1), as bias_grad.
  Rng rng(61);
  const int64_t shapes[][4] = {{1, 1, 1, 1}, {1, 7, 5, 3}, {4, 7, 8, 5}, {3, 64, 33, 50}, {2, 16, 768, 1000}};
  for (const auto& s : shapes) {
    const int64_t B = s[0], T = s[1], C = s[2], vocab = s[3];
    const std::string dims = "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                             " vocab=" + std::to_string(vocab);
    const auto tokens = random_tokens(rng, B * T, vocab);
    const auto wte = ds::test::random_vec(rng, vocab * C), wpe = ds::test::random_vec(rng, T * C);
    std::vector<float> out(B * T * C), outr(B * T * C);
    ds::cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), out.data(), B, T, C, vocab);
    ds::cpu::embedding_forward_reference(tokens.data(), wte.data(), wpe.data(), outr.data(), B, T, C, vocab);
    CHECK(ds::test::bit_identical(out, outr));

    const auto dout = ds::test::random_vec(rng, B * T * C);
    auto dwte = ds::test::random_vec(rng, vocab * C), dwpe = ds::test::random_vec(rng, T * C);  // +=
    auto dwter = dwte, dwper = dwpe;
    ds::cpu::embedding_backward(tokens.data(), dout.data(), dwte.data(), dwpe.data(), B, T, C, vocab);
    ds::cpu::embedding_backward_reference(tokens.data(), dout.data(), dwter.data(), dwper.data(), B, T, C, vocab);
    const double atol = 2e-7 * static_cast<double>(B * T + 1);
    ds::test::check_close("embedding dwte " + dims, dwte.data(), dwter.data(), dwte.size(), atol, 1e-6);
    ds::test::check_close("embedding dwpe " + dims, dwpe.data(), dwper.data(), dwpe.size(), atol, 1e-6);
  }
}

TEST_CASE("embedding rejects bad tokens and writes nothing") {
  const int64_t B = 2, T = 3, C = 2, vocab = 5;
  const std::vector<float> wte(vocab * C, 1.0f), wpe(T * C, 2.0f), dout(B * T * C, 1.0f);
  std::vector<int32_t> tokens{0, 1, 2, 3, 4, 5};
  std::vector<float> out(B * T * C, -7.0f), dwte(vocab * C, -7.0f), dwpe(T * C, -7.0f);
  const auto out0 = out, dwte0 = dwte, dwpe0 = dwpe;
  try {
    ds::cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), out.data(), B, T, C, vocab);
    FAIL("no exception");
  } catch (const std::out_of_range& e) {
    CHECK(std::string(e.what()) == "embedding: token 5 at position (b=1, t=2) is not in [0, 5)");
  }
  CHECK(out == out0);
  tokens[5] = 0;
  tokens[1] = -1;
  CHECK_THROWS_WITH_AS(
      ds::cpu::embedding_backward(tokens.data(), dout.data(), dwte.data(), dwpe.data(), B, T, C, vocab),
      "embedding: token -1 at position (b=0, t=1) is not in [0, 5)", std::out_of_range);
  CHECK(dwte == dwte0);
  CHECK(dwpe == dwpe0);
  CHECK_THROWS_AS(
      ds::cpu::embedding_forward_reference(tokens.data(), wte.data(), wpe.data(), out.data(), B, T, C, vocab),
      std::out_of_range);
  CHECK_THROWS_AS(
      ds::cpu::embedding_backward_reference(tokens.data(), dout.data(), dwte.data(), dwpe.data(), B, T, C, vocab),
      std::out_of_range);
}

TEST_CASE("embedding backward accumulates and is deterministic") {
  Rng rng(63);
  const int64_t B = 3, T = 11, C = 13, vocab = 7;
  const auto tokens = random_tokens(rng, B * T, vocab);
  const auto wte = ds::test::random_vec(rng, vocab * C), wpe = ds::test::random_vec(rng, T * C),
             dout = ds::test::random_vec(rng, B * T * C);
  std::vector<float> o1(B * T * C), o2(B * T * C);
  ds::cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), o1.data(), B, T, C, vocab);
  ds::cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), o2.data(), B, T, C, vocab);
  CHECK(ds::test::bit_identical(o1, o2));
  std::vector<float> e1(vocab * C, 0.0f), p1(T * C, 0.0f), e2 = e1, p2 = p1, e3 = e1, p3 = p1;
  ds::cpu::embedding_backward(tokens.data(), dout.data(), e1.data(), p1.data(), B, T, C, vocab);
  ds::cpu::embedding_backward(tokens.data(), dout.data(), e3.data(), p3.data(), B, T, C, vocab);
  CHECK(ds::test::bit_identical(e1, e3));
  CHECK(ds::test::bit_identical(p1, p3));
  ds::cpu::embedding_backward(tokens.data(), dout.data(), e2.data(), p2.data(), B, T, C, vocab);
  ds::cpu::embedding_backward(tokens.data(), dout.data(), e2.data(), p2.data(), B, T, C, vocab);
  for (size_t i = 0; i < e1.size(); ++i) CHECK(e2[i] == doctest::Approx(2 * e1[i]).epsilon(1e-6));
  for (size_t i = 0; i < p1.size(); ++i) CHECK(p2[i] == doctest::Approx(2 * p1[i]).epsilon(1e-6));
}
