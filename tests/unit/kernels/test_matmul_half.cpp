// matmul_half: 16-bit products (bf16 on oneDNN, fp16 on sgemm) against the reference on rounded operands, on
// odd shapes and every transpose, small and split; the operands really rounded; bits at any thread count.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <limits>
#include <stdexcept>
#include <vector>

#include "amp/half.h"
#include "cpu/matmul.h"
#include "cpu/matmul_half.h"
#include "cpu/parallel.h"
#include "kernel_test_util.h"

using ds::amp::Half;
using ds::test::Rng;

namespace {

struct Dims {
  int64_t M, N, K;
};

// The reference sums exact products in double; the fast paths sum them in fp32: error ~eps·K relative.
void compare(Half type, const Dims& d, bool ta, bool tb, bool acc, Rng& rng) {
  const auto A = ds::test::random_vec(rng, d.M * d.K), B = ds::test::random_vec(rng, d.K * d.N);
  auto C = ds::test::random_vec(rng, d.M * d.N);
  auto R = C;
  ds::cpu::matmul_half(type, A.data(), B.data(), C.data(), d.M, d.N, d.K, ta, tb, acc);
  ds::cpu::matmul_half_reference(type, A.data(), B.data(), R.data(), d.M, d.N, d.K, ta, tb, acc);
  const std::string what = std::string(type == Half::BF16 ? "bf16" : "fp16") + " M=" + std::to_string(d.M) +
                           " N=" + std::to_string(d.N) + " K=" + std::to_string(d.K) + (ta ? " A^T" : "") +
                           (tb ? " B^T" : "") + (acc ? " +=" : "");
  ds::test::check_close(what, C.data(), R.data(), C.size(), 2e-7 * static_cast<double>(d.K + 1), 1e-5);
}

}  // namespace

TEST_CASE("matmul_half matches the reference on rounded operands, small and split, every transpose") {
  std::printf("bf16 products: %s\n", ds::cpu::matmul_bf16_kernel().c_str());
  // ctest runs these again with oneDNN held to AVX2 (tests/unit/CMakeLists.txt): the sgemm path.
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (isa != nullptr && std::string(isa) == "AVX2") CHECK(ds::cpu::matmul_bf16_kernel() == "sgemm on rounded operands");
  CHECK(ds::cpu::bf16_units() == (ds::cpu::matmul_bf16_kernel() != "sgemm on rounded operands"));
  Rng rng(11);
  // Small ones run as one call; from 2^24 multiply-adds by rows (M >= N) or by columns, ragged last blocks.
  const Dims shapes[] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 128, 32}, {1000, 70, 300}, {70, 1000, 300},
                         {333, 333, 200}};
  for (Half type : {Half::BF16, Half::F16})
    for (const Dims& d : shapes)
      for (int t = 0; t < 8; ++t) compare(type, d, t & 1, t & 2, t & 4, rng);
}

TEST_CASE("matmul_half multiplies the operands' 16-bit values, not their fp32 ones") {
  // 1 + 2^-12 is 1 in bf16 and in fp16: the fp32 product of the rows differs from the 16-bit one.
  const float a = 1.0f + 1.0f / 4096.0f;
  std::vector<float> A(16, a), B(16, a), C(1), F(1);
  for (Half type : {Half::BF16, Half::F16}) {
    ds::cpu::matmul_half(type, A.data(), B.data(), C.data(), 1, 1, 16, false, false, false);
    CHECK(C[0] == 16.0f);
  }
  ds::cpu::matmul(A.data(), B.data(), F.data(), 1, 1, 16, false, false, false);
  CHECK(F[0] > 16.0f);
  // bf16's 8-bit significand: 1 + 2^-7 survives, 1 + 2^-9 does not; fp16 keeps both.
  std::vector<float> X{1.0f + 1.0f / 128.0f, 1.0f + 1.0f / 512.0f}, Y{1.0f, 1.0f};
  ds::cpu::matmul_half(Half::BF16, X.data(), Y.data(), C.data(), 1, 1, 2, false, false, false);
  CHECK(C[0] == 2.0f + 1.0f / 128.0f);
  ds::cpu::matmul_half(Half::F16, X.data(), Y.data(), C.data(), 1, 1, 2, false, false, false);
  CHECK(C[0] == 2.0f + 1.0f / 128.0f + 1.0f / 512.0f);
}

TEST_CASE("matmul_half with an empty dimension, over NaN, and bad sizes") {
  std::vector<float> A(6, 1.0f), B(6, 1.0f);
  std::vector<float> C(4, std::numeric_limits<float>::quiet_NaN());
  ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), C.data(), 2, 2, 0, false, false, false);
  for (float v : C) CHECK(v == 0.0f);
  std::vector<float> D(4, 3.0f);
  ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), D.data(), 2, 2, 0, false, true, true);
  for (float v : D) CHECK(v == 3.0f);
  std::vector<float> E(4, std::numeric_limits<float>::quiet_NaN());  // overwritten, never read
  ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), E.data(), 2, 2, 3, false, false, false);
  for (float v : E) CHECK(v == 3.0f);
  CHECK_THROWS_AS(ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), C.data(), 1, -1, 1, false, false, false),
                  std::invalid_argument);
}

TEST_CASE("matmul_half gives the same bits at 1 and 2 threads, run to run") {
  const int saved = ds::cpu::threads();
  const bool on_onednn = ds::cpu::matmul_bf16_kernel() != "sgemm on rounded operands";
  Rng rng(5);
  for (const Dims d : {Dims{1000, 70, 300}, Dims{70, 1000, 300}, Dims{100, 90, 80}})
    for (int t = 0; t < 8; ++t) {
      const bool ta = t & 1, tb = t & 2, acc = t & 4;
      const auto A = ds::test::random_vec(rng, d.M * d.K), B = ds::test::random_vec(rng, d.K * d.N);
      const auto C0 = ds::test::random_vec(rng, d.M * d.N);
      std::vector<float> one = C0, two = C0, again = C0;
      ds::cpu::set_threads(1);
      ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), one.data(), d.M, d.N, d.K, ta, tb, acc);
      ds::cpu::set_threads(2);
      ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), two.data(), d.M, d.N, d.K, ta, tb, acc);
      ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), again.data(), d.M, d.N, d.K, ta, tb, acc);
      INFO("M=", d.M, " N=", d.N, " K=", d.K, " trans_a=", ta, " trans_b=", tb, " accumulate=", acc);
      if (on_onednn) CHECK(ds::test::bit_identical(one, two));  // (sgemm's small products: matmul.h's rules)
      CHECK(ds::test::bit_identical(two, again));
    }
  ds::cpu::set_threads(saved);
}

// Sampling with a growing context multiplies a new number of rows at each length: the kernels kept per shape stay
// bounded (the cache starts again when full), and the products after that are still right.
TEST_CASE("matmul_half keeps a bounded number of oneDNN kernels") {
  const bool on_onednn = ds::cpu::matmul_bf16_kernel() != "sgemm on rounded operands";
  Rng rng(9);
  const int64_t shapes = static_cast<int64_t>(ds::cpu::kMatmulHalfKernelsKept) + 40;
  for (int64_t m = 1; m <= shapes; ++m) {
    const auto A = ds::test::random_vec(rng, m * 8), B = ds::test::random_vec(rng, 8 * 8);
    std::vector<float> C(static_cast<size_t>(m * 8));
    ds::cpu::matmul_half(Half::BF16, A.data(), B.data(), C.data(), m, 8, 8, false, false, false);
    CHECK(ds::cpu::matmul_half_kernels_cached() <= ds::cpu::kMatmulHalfKernelsKept);
  }
  if (on_onednn) CHECK(ds::cpu::matmul_half_kernels_cached() > 0);
  for (const Dims d : {Dims{shapes, 8, 8}, Dims{3, 8, 8}, Dims{100, 90, 80}}) compare(Half::BF16, d, false, true, true, rng);
}
