// Adagrad's loop (cpu/adagrad.h): the threaded loop gives its scalar reference's bits at 1-3 threads for every
// storage combination, at sizes across the threads' split, on the first step and later ones.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "amp/storage.h"
#include "cpu/adagrad.h"
#include "cpu/parallel.h"
#include "kernel_test_util.h"

using ds::amp::Storage;
using ds::test::stored;

TEST_CASE("adagrad: the threaded loop gives its reference's bits at any thread count") {
  const int saved = ds::cpu::threads();
  ds::test::Rng rng(24);
  for (const auto& c : ds::test::kStorageCombos)
    for (size_t n : {size_t{1}, size_t{33}, size_t{70001}})
      for (const ds::cpu::AdagradArgs& a : {ds::cpu::AdagradArgs{0.1f, 0.0f, 1e-10f, 0.0f, true},
                                            ds::cpu::AdagradArgs{0.05f, 0.01f, 1e-6f, 0.1f, false}}) {
        CAPTURE(n);
        CAPTURE(a.first);
        const auto p0 = stored(c.param, ds::test::random_vec(rng, n)), g = stored(c.grad, ds::test::random_vec(rng, n)),
                   s0 = stored(c.state, ds::test::random_vec(rng, n, 0.0f, 1.0f));
        auto p_ref = p0, s_ref = s0;
        ds::cpu::adagrad_step_reference(p_ref.data(), c.param, g.data(), c.grad, s_ref.data(), c.state, n, a);
        CHECK(p_ref != p0);
        for (int t : {1, 2, 3}) {
          ds::cpu::set_threads(t);
          auto p = p0, s = s0;
          ds::cpu::adagrad_step(p.data(), c.param, g.data(), c.grad, s.data(), c.state, n, a);
          CHECK(p == p_ref);
          CHECK(s == s_ref);
        }
      }
  ds::cpu::set_threads(saved);
}
