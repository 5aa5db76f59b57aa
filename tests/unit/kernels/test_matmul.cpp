// matmul: OpenBLAS fast path vs the scalar reference on random (odd) shapes and every transpose
// combination; empty sizes; determinism.
#include <doctest/doctest.h>

#include <limits>
#include <stdexcept>

#include "cpu/blas.h"
#include "cpu/matmul.h"
#include "cpu/parallel.h"
#include "kernel_test_util.h"

using ds::test::Rng;

namespace {

struct Case {
  int64_t M, N, K;
};

// Inputs in [-1, 1): the reference's double sum is exact to ~1e-16; the fast one's fp32 error
// grows like eps·K in the worst case.
void compare(const Case& c, bool ta, bool tb, bool acc, Rng& rng) {
  const auto A = ds::test::random_vec(rng, c.M * c.K);
  const auto B = ds::test::random_vec(rng, c.K * c.N);
  auto C = ds::test::random_vec(rng, c.M * c.N);
  auto R = C;
  ds::cpu::matmul(A.data(), B.data(), C.data(), c.M, c.N, c.K, ta, tb, acc);
  ds::cpu::matmul_reference(A.data(), B.data(), R.data(), c.M, c.N, c.K, ta, tb, acc);
  const std::string what = "matmul M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
                           " K=" + std::to_string(c.K) + (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                           (acc ? " +=" : "");
  ds::test::check_close(what, C.data(), R.data(), C.size(), 2e-7 * static_cast<double>(c.K + 1), 1e-5);
}

}  // namespace

TEST_CASE("matmul matches the reference on odd shapes and all transposes") {
  std::printf("OpenBLAS: %s, %d thread(s)\n", ds::cpu::blas_config().c_str(), ds::cpu::blas_threads());
  Rng rng(42);
  const Case fixed[] = {{1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {7, 5, 3}, {33, 17, 65}, {128, 10, 128}, {64, 128, 32}};
  for (const auto& c : fixed)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int acc = 0; acc < 2; ++acc) compare(c, ta, tb, acc, rng);
  for (int i = 0; i < 12; ++i) {
    const Case c{1 + rng.below(200), 1 + rng.below(200), 1 + rng.below(300)};
    compare(c, rng.below(2), rng.below(2), rng.below(2), rng);
  }
}

TEST_CASE("matmul with an empty dimension") {
  std::vector<float> A(6, 1.0f), B(6, 1.0f);
  SUBCASE("K = 0 overwrites C with zeros, or leaves it when accumulating") {
    std::vector<float> C(4, std::numeric_limits<float>::quiet_NaN());
    ds::cpu::matmul(A.data(), B.data(), C.data(), 2, 2, 0, false, false, false);
    for (float v : C) CHECK(v == 0.0f);
    std::vector<float> D(4, 3.0f);
    ds::cpu::matmul(A.data(), B.data(), D.data(), 2, 2, 0, false, true, true);
    for (float v : D) CHECK(v == 3.0f);
  }
  SUBCASE("M = 0 or N = 0 touches nothing") {
    ds::cpu::matmul(A.data(), B.data(), nullptr, 0, 3, 2, false, false, false);
    ds::cpu::matmul(A.data(), B.data(), nullptr, 3, 0, 2, true, false, true);
  }
  CHECK_THROWS_AS(ds::cpu::matmul(A.data(), B.data(), nullptr, -1, 1, 1, false, false, false),
                  std::invalid_argument);
}

TEST_CASE("matmul overwrite ignores NaN already in C") {
  Rng rng(7);
  const auto A = ds::test::random_vec(rng, 4 * 3), B = ds::test::random_vec(rng, 3 * 5);
  std::vector<float> C(20, std::numeric_limits<float>::quiet_NaN()), R(20);
  ds::cpu::matmul(A.data(), B.data(), C.data(), 4, 5, 3, false, false, false);
  ds::cpu::matmul_reference(A.data(), B.data(), R.data(), 4, 5, 3, false, false, false);
  ds::test::check_close("matmul over NaN-filled C", C.data(), R.data(), 20, 1e-5, 1e-5);
}

TEST_CASE("matmul is bit-identical run to run for a fixed thread count") {
  const int saved = ds::cpu::threads();
  Rng rng(3);
  const int64_t M = 257, N = 129, K = 511;
  const auto A = ds::test::random_vec(rng, M * K), B = ds::test::random_vec(rng, K * N);
  std::vector<std::vector<float>> by_threads;
  for (int threads : {1, 2}) {
    ds::cpu::set_threads(threads);
    std::vector<float> C1(M * N), C2(M * N);
    ds::cpu::matmul(A.data(), B.data(), C1.data(), M, N, K, false, true, false);
    ds::cpu::matmul(A.data(), B.data(), C2.data(), M, N, K, false, true, false);
    CHECK(ds::test::bit_identical(C1, C2));
    by_threads.push_back(C1);
  }
  // Not asserted: equal across thread counts on SkylakeX/Cooperlake, not on Haswell/Prescott.
  std::printf("  matmul 1 vs 2 threads bit-identical on core %s: %s\n", ds::cpu::blas_corename().c_str(),
              ds::test::bit_identical(by_threads[0], by_threads[1]) ? "yes" : "no");
  ds::cpu::set_threads(saved);
  CHECK_THROWS_AS(ds::cpu::set_threads(0), std::invalid_argument);
}

TEST_CASE("the kernels and OpenBLAS share one OpenMP thread pool") {
  // The build links OpenBLAS's OpenMP variant; with the pthread one its idle threads spin on the
  // cores the kernels' own loops need.
  CHECK(ds::cpu::blas_threading() == "OpenMP");
  const int saved = ds::cpu::threads();
  ds::cpu::set_threads(2);
  CHECK(ds::cpu::threads() == 2);
  CHECK(ds::cpu::blas_threads() == 2);
  ds::cpu::set_threads(saved);
}

TEST_CASE("large products split over the threads give the same bits at any thread count") {
  // Past ~16.7 M multiply-adds matmul cuts C's longer side into blocks, one sgemm each: rows
  // (M >= N) or columns (N > M), in every transpose combination, accumulating or not, with sizes
  // that leave a ragged last block. 2 threads must reproduce 1 thread exactly.
  const int saved = ds::cpu::threads();
  Rng rng(17);
  struct Dims {
    int64_t M, N, K;
  };
  for (const Dims d : {Dims{1000, 70, 300}, Dims{70, 1000, 300}, Dims{333, 333, 200}})
    for (int t = 0; t < 8; ++t) {
      const bool ta = t & 1, tb = t & 2, acc = t & 4;
      const auto A = ds::test::random_vec(rng, d.M * d.K), B = ds::test::random_vec(rng, d.K * d.N);
      const auto C0 = ds::test::random_vec(rng, d.M * d.N);
      std::vector<float> one = C0, two = C0, ref = C0;
      ds::cpu::set_threads(1);
      ds::cpu::matmul(A.data(), B.data(), one.data(), d.M, d.N, d.K, ta, tb, acc);
      ds::cpu::set_threads(2);
      ds::cpu::matmul(A.data(), B.data(), two.data(), d.M, d.N, d.K, ta, tb, acc);
      ds::cpu::matmul_reference(A.data(), B.data(), ref.data(), d.M, d.N, d.K, ta, tb, acc);
      INFO("M=", d.M, " N=", d.N, " K=", d.K, " trans_a=", ta, " trans_b=", tb, " accumulate=", acc);
      CHECK(ds::test::bit_identical(one, two));
      ds::test::check_close("split matmul", two.data(), ref.data(), two.size(), 1e-4, 1e-4);
    }
  ds::cpu::set_threads(saved);
}
