// LayerNorm: fast vs reference (odd shapes, a GPT-2-width one, a large common offset),
// accumulate-vs-overwrite, determinism. (Gradients against central differences:
// tests/unit/backend/test_backend_ops.cpp.)
#include <doctest/doctest.h>

#include <limits>

#include "cpu/layernorm.h"
#include "kernel_test_util.h"

using ds::test::Rng;

namespace {

constexpr float kEps = 1e-5f;

}  // namespace

TEST_CASE("layernorm matches the reference") {
  // Tolerances: y and dx are a handful of fp32 roundings of O(1) values (|x̂| ≤ √dim, gamma ~ 1),
  // so atol 2e-6 + rtol 1e-5; the stats are one rounding of a double (1e-6 relative). With a
  // common offset μ, the fast path's x − μ uses μ rounded to fp32 (as stored for backward), which
  // shifts y by up to ½ulp(μ)·ρ·|gamma| ≤ 6e-8·|μ|·3·1.5 (ρ ≲ 3 for these rows): +3e-7·|μ| on y.
  // dgamma/dbeta are summed in double over the rows in both paths; the fast path's fp32 x̂ leaves
  // ~1e-7·rows.
  Rng rng(51);
  const int64_t shapes[][2] = {{1, 1}, {1, 5}, {3, 5}, {7, 64}, {4, 768}, {33, 17}, {2, 1000}};
  for (const auto& sh : shapes) {
    const int64_t rows = sh[0], dim = sh[1];
    for (float offset : {0.0f, 10.0f}) {
      const std::string dims = std::to_string(rows) + "x" + std::to_string(dim) + " offset " +
                               std::to_string(static_cast<int>(offset));
      const auto x = ds::test::random_vec(rng, rows * dim, offset - 1.0f, offset + 1.0f);
      const auto gamma = ds::test::random_vec(rng, dim, 0.5f, 1.5f), beta = ds::test::random_vec(rng, dim);
      std::vector<float> y(rows * dim), yr(rows * dim), st(2 * rows), str(2 * rows);
      ds::cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), st.data(), rows, dim, kEps);
      ds::cpu::layernorm_forward_reference(x.data(), gamma.data(), beta.data(), yr.data(), str.data(), rows, dim,
                                           kEps);
      ds::test::check_close("layernorm y " + dims, y.data(), yr.data(), y.size(), 2e-6 + 3e-7 * offset, 1e-5);
      ds::test::check_close("layernorm stats " + dims, st.data(), str.data(), st.size(), 1e-7, 1e-6);

      const auto dy = ds::test::random_vec(rng, rows * dim);
      std::vector<float> dx(rows * dim), dxr(rows * dim);
      auto dg = ds::test::random_vec(rng, dim), db = ds::test::random_vec(rng, dim);  // nonzero: +=
      auto dgr = dg, dbr = db;
      ds::cpu::layernorm_backward(x.data(), gamma.data(), st.data(), dy.data(), dx.data(), dg.data(), db.data(),
                                  rows, dim);
      ds::cpu::layernorm_backward_reference(x.data(), gamma.data(), str.data(), dy.data(), dxr.data(), dgr.data(),
                                            dbr.data(), rows, dim);
      ds::test::check_close("layernorm dx " + dims, dx.data(), dxr.data(), dx.size(), 2e-6, 1e-5);
      const double atol_rows = 2e-7 * static_cast<double>(rows + 1);
      ds::test::check_close("layernorm dgamma " + dims, dg.data(), dgr.data(), dim, atol_rows, 1e-6);
      ds::test::check_close("layernorm dbeta " + dims, db.data(), dbr.data(), dim, atol_rows, 1e-6);
    }
  }
}

TEST_CASE("layernorm backward overwrites dx and accumulates dgamma and dbeta") {
  Rng rng(53);
  const int64_t rows = 9, dim = 31;
  const auto x = ds::test::random_vec(rng, rows * dim), gamma = ds::test::random_vec(rng, dim),
             beta = ds::test::random_vec(rng, dim), dy = ds::test::random_vec(rng, rows * dim);
  std::vector<float> y(rows * dim), st(2 * rows);
  ds::cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), st.data(), rows, dim, kEps);
  std::vector<float> dx1(rows * dim), dx2(rows * dim, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> g1(dim, 0.0f), b1(dim, 0.0f), g2(dim, 0.0f), b2(dim, 0.0f);
  ds::cpu::layernorm_backward(x.data(), gamma.data(), st.data(), dy.data(), dx1.data(), g1.data(), b1.data(), rows,
                              dim);
  ds::cpu::layernorm_backward(x.data(), gamma.data(), st.data(), dy.data(), dx2.data(), g2.data(), b2.data(), rows,
                              dim);
  ds::cpu::layernorm_backward(x.data(), gamma.data(), st.data(), dy.data(), dx2.data(), g2.data(), b2.data(), rows,
                              dim);
  CHECK(ds::test::bit_identical(dx1, dx2));  // the NaN fill and the first call's dx are not read
  for (int64_t c = 0; c < dim; ++c) {
    CHECK(g2[c] == doctest::Approx(2 * g1[c]).epsilon(1e-6));
    CHECK(b2[c] == doctest::Approx(2 * b1[c]).epsilon(1e-6));
  }
}

TEST_CASE("layernorm is bit-identical run to run") {
  Rng rng(54);
  const int64_t rows = 65, dim = 771;
  const auto x = ds::test::random_vec(rng, rows * dim, -3.0f, 3.0f), gamma = ds::test::random_vec(rng, dim),
             beta = ds::test::random_vec(rng, dim), dy = ds::test::random_vec(rng, rows * dim);
  auto run = [&] {
    std::vector<float> y(rows * dim), st(2 * rows), dx(rows * dim), dg(dim, 0.0f), db(dim, 0.0f);
    ds::cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), st.data(), rows, dim, kEps);
    ds::cpu::layernorm_backward(x.data(), gamma.data(), st.data(), dy.data(), dx.data(), dg.data(), db.data(), rows,
                                dim);
    y.insert(y.end(), st.begin(), st.end());
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dg.begin(), dg.end());
    y.insert(y.end(), db.begin(), db.end());
    return y;
  };
  CHECK(ds::test::bit_identical(run(), run()));
}
