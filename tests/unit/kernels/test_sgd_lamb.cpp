// SGD's and LAMB's loops (cpu/sgd_lamb.h): the threaded loops give their scalar references' bits at 1-3
// threads for every storage combination and at sizes across the threads' split, and LAMB's sums are the
// same at any thread count (one block: the reference's own order).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "amp/storage.h"
#include "cpu/convert.h"
#include "cpu/parallel.h"
#include "cpu/sgd_lamb.h"
#include "kernel_test_util.h"

namespace {

using ds::amp::Storage;

using ds::test::stored;

using ds::test::kStorageCombos;
constexpr size_t kSizes[] = {1, 33, 70001, 2 * ds::cpu::kSumBlock + 7};

}  // namespace

TEST_CASE("sgd: the threaded loop gives its reference's bits at any thread count") {
  const int saved = ds::cpu::threads();
  ds::test::Rng rng(21);
  const ds::cpu::SgdArgs cases[] = {{0.1f, 0.01f, 0.0f, 1.0f, false, false},
                                    {0.1f, 0.01f, 0.9f, 0.75f, false, true},
                                    {0.1f, 0.0f, 0.9f, 0.75f, false, false},
                                    {0.05f, 0.01f, 0.9f, 1.0f, true, false}};
  for (const auto& c : kStorageCombos)
    for (size_t n : kSizes)
      for (const ds::cpu::SgdArgs& a : cases) {
        CAPTURE(n);
        CAPTURE(a.momentum);
        CAPTURE(a.nesterov);
        CAPTURE(a.first);
        const auto p0 = stored(c.param, ds::test::random_vec(rng, n)), g = stored(c.grad, ds::test::random_vec(rng, n)),
                   b0 = stored(c.state, ds::test::random_vec(rng, n));
        auto p_ref = p0, b_ref = b0;
        ds::cpu::sgd_step_reference(p_ref.data(), c.param, g.data(), c.grad, b_ref.data(), c.state, n, a);
        CHECK(p_ref != p0);
        for (int t : {1, 2, 3}) {
          ds::cpu::set_threads(t);
          auto p = p0, b = b0;
          ds::cpu::sgd_step(p.data(), c.param, g.data(), c.grad, b.data(), c.state, n, a);
          CHECK(p == p_ref);
          CHECK(b == b_ref);
        }
      }
  ds::cpu::set_threads(saved);
}

TEST_CASE("lamb: the threaded passes give their references' bits and thread-independent sums") {
  const int saved = ds::cpu::threads();
  ds::test::Rng rng(22);
  for (const auto& c : kStorageCombos)
    for (size_t n : kSizes)
      for (bool inside : {false, true}) {
        CAPTURE(n);
        CAPTURE(inside);
        const ds::cpu::LambArgs a{0.9f, 0.999f, 1e-6f, 0.01f, inside};
        const auto p0 = stored(c.param, ds::test::random_vec(rng, n)), g = stored(c.grad, ds::test::random_vec(rng, n)),
                   m0 = stored(c.state, ds::test::random_vec(rng, n, -0.1f, 0.1f)),
                   v0 = stored(c.state, ds::test::random_vec(rng, n, 0.0f, 0.01f));
        auto p_ref = p0, m_ref = m0, v_ref = v0;
        ds::cpu::LambArrays ref{p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, c.param, c.grad, c.state};
        const ds::cpu::LambSums sums_ref = ds::cpu::lamb_moments_reference(ref, a);
        ds::cpu::lamb_apply_reference(ref, a, 0.37f);
        ds::cpu::LambSums first{};
        for (int t : {1, 2, 3}) {
          CAPTURE(t);
          ds::cpu::set_threads(t);
          auto p = p0, m = m0, v = v0;
          ds::cpu::LambArrays x{p.data(), g.data(), m.data(), v.data(), n, c.param, c.grad, c.state};
          const ds::cpu::LambSums sums = ds::cpu::lamb_moments(x, a);
          ds::cpu::lamb_apply(x, a, 0.37f);
          CHECK(p == p_ref);
          CHECK(m == m_ref);
          CHECK(v == v_ref);
          if (t == 1) first = sums;
          CHECK(sums.p_sq == first.p_sq);
          CHECK(sums.u_sq == first.u_sq);
          CHECK(std::fabs(sums.p_sq - sums_ref.p_sq) <= 1e-12 * sums_ref.p_sq);
          CHECK(std::fabs(sums.u_sq - sums_ref.u_sq) <= 1e-12 * sums_ref.u_sq);
          if (n <= ds::cpu::kSumBlock) {
            CHECK(sums.p_sq == sums_ref.p_sq);
            CHECK(sums.u_sq == sums_ref.u_sq);
          }
        }
      }
  ds::cpu::set_threads(saved);
}
