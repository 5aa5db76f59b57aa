// RMSprop's loop (cpu/rmsprop.h): the threaded loop gives its scalar reference's bits at 1-3 threads for every
// storage combination, plain, with momentum, centered (a weight below and above 0.5) and both, at sizes across
// the threads' split, on the first step and later ones; the buffers a variant does not use are not touched.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "amp/storage.h"
#include "cpu/parallel.h"
#include "cpu/rmsprop.h"
#include "kernel_test_util.h"

using ds::amp::Storage;
using ds::test::stored;

TEST_CASE("rmsprop: the threaded loop gives its reference's bits at any thread count, in every variant") {
  const int saved = ds::cpu::threads();
  ds::test::Rng rng(31);
  const ds::cpu::RmspropArgs cases[] = {
      {0.01f, 0.99f, 1.0f - 0.99f, 1e-8f, 0.0f, 0.0f, false, true},     // torch's defaults, first step
      {0.01f, 0.99f, 1.0f - 0.99f, 1e-8f, 0.01f, 0.0f, false, false},   // weight decay, a later step
      {0.02f, 0.9f, 1.0f - 0.9f, 1e-6f, 0.0f, 0.9f, false, false},      // momentum
      {0.02f, 0.9f, 1.0f - 0.9f, 1e-6f, 0.01f, 0.5f, true, true},       // centered and momentum, first step
      {0.02f, 0.25f, 1.0f - 0.25f, 1e-6f, 0.0f, 0.0f, true, false}};    // centered, lerp's weight above 0.5
  for (const auto& c : ds::test::kStorageCombos)
    for (size_t n : {size_t{1}, size_t{33}, size_t{70001}})
      for (const ds::cpu::RmspropArgs& a : cases) {
        CAPTURE(n);
        CAPTURE(a.alpha);
        CAPTURE(a.first);
        const auto p0 = stored(c.param, ds::test::random_vec(rng, n)), g = stored(c.grad, ds::test::random_vec(rng, n)),
                   s0 = stored(c.state, ds::test::random_vec(rng, n, 0.5f, 1.0f)),
                   m0 = stored(c.state, ds::test::random_vec(rng, n, -0.1f, 0.1f)),
                   b0 = stored(c.state, ds::test::random_vec(rng, n));
        auto p_ref = p0, s_ref = s0, m_ref = m0, b_ref = b0;
        auto state = [&](auto& s, auto& m, auto& b) {
          return ds::cpu::RmspropState{s.data(), a.centered ? m.data() : nullptr,
                                       a.momentum > 0.0f ? b.data() : nullptr};
        };
        ds::cpu::rmsprop_step_reference(p_ref.data(), c.param, g.data(), c.grad, state(s_ref, m_ref, b_ref), c.state, n,
                                        a);
        if (n > 1) CHECK(p_ref != p0);  // (one bf16 parameter's step may round away)
        CHECK(s_ref != s0);
        CHECK((m_ref != m0) == a.centered);
        CHECK((b_ref != b0) == (a.momentum > 0.0f));
        for (int t : {1, 2, 3}) {
          ds::cpu::set_threads(t);
          auto p = p0, s = s0, m = m0, b = b0;
          ds::cpu::rmsprop_step(p.data(), c.param, g.data(), c.grad, state(s, m, b), c.state, n, a);
          CHECK(p == p_ref);
          CHECK(s == s_ref);
          CHECK(m == m_ref);
          CHECK(b == b_ref);
        }
      }
  ds::cpu::set_threads(saved);
}
