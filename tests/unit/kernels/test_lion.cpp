// Lion's loop (cpu/lion.h): the threaded loop gives its scalar reference's bits at 1-3 threads for every storage
// combination and at sizes across the threads' split; sign(0) is 0 and a NaN stays a NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "amp/storage.h"
#include "cpu/convert.h"
#include "cpu/lion.h"
#include "cpu/parallel.h"
#include "kernel_test_util.h"

namespace {

using ds::amp::Storage;

using ds::test::stored;

// lr, wd, β1, β2 as the optimizer forms them.
ds::cpu::LionArgs args(float lr, float wd, float beta1, float beta2) {
  return {lr, 1.0f - lr * wd, beta1, 1.0f - beta1, beta2, 1.0f - beta2};
}

}  // namespace

TEST_CASE("lion: the threaded loop gives its reference's bits at any thread count") {
  const int saved = ds::cpu::threads();
  ds::test::Rng rng(23);
  for (const auto& c : ds::test::kStorageCombos)
    for (size_t n : {size_t{1}, size_t{33}, size_t{70001}})
      for (const ds::cpu::LionArgs& a : {args(0.05f, 0.0f, 0.9f, 0.9f), args(0.02f, 0.1f, 0.95f, 0.8f)}) {  // (steps bf16 sees)
        CAPTURE(n);
        CAPTURE(a.after_decay);
        const auto p0 = stored(c.param, ds::test::random_vec(rng, n)), g = stored(c.grad, ds::test::random_vec(rng, n)),
                   m0 = stored(c.state, ds::test::random_vec(rng, n));
        auto p_ref = p0, m_ref = m0;
        ds::cpu::lion_step_reference(p_ref.data(), c.param, g.data(), c.grad, m_ref.data(), c.state, n, a);
        CHECK(p_ref != p0);
        CHECK(m_ref != m0);
        for (int t : {1, 2, 3}) {
          ds::cpu::set_threads(t);
          auto p = p0, m = m0;
          ds::cpu::lion_step(p.data(), c.param, g.data(), c.grad, m.data(), c.state, n, a);
          CHECK(p == p_ref);
          CHECK(m == m_ref);
        }
      }
  ds::cpu::set_threads(saved);
}

// Each parameter moves by exactly lr (the sign of the interpolation, not its size), after the decay.
TEST_CASE("lion: a step moves each parameter by lr against the sign of β1·m + (1−β1)·g; 0 at 0") {
  const ds::cpu::LionArgs a = args(0.125f, 0.5f, 0.75f, 0.5f);  // after_decay 1 − 1/16
  //                          c = 0.75·m + 0.25·g:  0.25 (up),  −0.25 (down),  0 (m and g cancel),  0 (both 0)
  std::vector<float> p = {1.0f, 1.0f, 1.0f, 1.0f}, g = {1.0f, -1.0f, 3.0f, 0.0f}, m = {0.0f, 0.0f, -1.0f, 0.0f};
  ds::cpu::lion_step(p.data(), Storage::F32, g.data(), Storage::F32, m.data(), Storage::F32, p.size(), a);
  CHECK(p == std::vector<float>{0.9375f - 0.125f, 0.9375f + 0.125f, 0.9375f, 0.9375f});
  CHECK(m == std::vector<float>{0.5f, -0.5f, 1.0f, 0.0f});  // 0.5·m + 0.5·g
  // Without decay, a parameter with neither gradient nor momentum stays (DeepSpeed's loops move it by lr).
  std::vector<float> q = {2.0f}, zero = {0.0f}, m0 = {0.0f};
  ds::cpu::lion_step(q.data(), Storage::F32, zero.data(), Storage::F32, m0.data(), Storage::F32, 1,
                     args(0.1f, 0.0f, 0.9f, 0.99f));
  CHECK(q[0] == 2.0f);
  CHECK(m0[0] == 0.0f);
  std::vector<float> nan = {std::nanf("")};
  ds::cpu::lion_step(q.data(), Storage::F32, nan.data(), Storage::F32, m0.data(), Storage::F32, 1,
                     args(0.1f, 0.0f, 0.9f, 0.99f));
  CHECK(std::isnan(q[0]));
  CHECK(std::isnan(m0[0]));
}
