// 1-bit Adam (DeepSpeed's OnebitAdam) on thread ranks: step 1 changes nothing; steps 2…F are Adam
// without bias correction on the gradient given; after F the engine's all-reduce is off, v is
// bit-frozen and m is the compressed average of the ranks' momenta (checked against a
// CompressedAllreduce run beside it), the same on every rank; one rank compresses nothing; a
// checkpoint load zeroes the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/compressed_allreduce.h"
#include "comm/thread_ranks.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

using namespace ds;
using ds::test::values;

namespace {

constexpr double kLr = 0.01;

OptimizerConfig onebit(int64_t freeze_step, double weight_decay = 0.0) {
  OneBitAdamParams a;
  a.freeze_step = freeze_step;
  a.weight_decay = weight_decay;
  return test::optimizer_config(OptimizerType::OneBitAdam, kLr, a);
}

// Rank r's gradient element i at step t: different on every rank.
float grad(int r, size_t i, int64_t t) {
  return static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 1.3 * static_cast<double>(t) + 2.1 * r)) * 0.5f;
}

const std::vector<TensorRange> kTensors = {{0, 5}, {5, 12}, {17, 3}};
constexpr size_t kN = 20;

}  // namespace

TEST_CASE("onebit adam: step 1 is a no-op, then Adam without bias correction until freeze_step") {
  run_ranks(1, [](ProcessGroup& g) {
    auto opt = make_optimizer(onebit(4, 0.1), kN, {}, &g);
    std::vector<float> p(kN), gr(kN);
    for (size_t i = 0; i < kN; ++i) p[i] = 0.1f * static_cast<float>(i) - 1.0f;
    std::vector<float> ref_p = p, m(kN, 0.0f), v(kN, 0.0f);
    const float b1 = 0.9f, b2 = 0.999f, c1 = static_cast<float>(1.0 - 0.9), c2 = static_cast<float>(1.0 - 0.999);
    for (int64_t t = 1; t <= 4; ++t) {
      CHECK(opt->wants_averaged_gradients(t));
      for (size_t i = 0; i < kN; ++i) gr[i] = grad(0, i, t);
      opt->step(p.data(), gr.data(), kN, kTensors, kLr, t);
      if (t == 1) {
        CHECK(p == ref_p);  // DeepSpeed's set-up step: nothing changes
        continue;
      }
      for (size_t i = 0; i < kN; ++i) {
        m[i] = b1 * m[i] + c1 * gr[i];
        v[i] = b2 * v[i] + c2 * gr[i] * gr[i];
        ref_p[i] -= static_cast<float>(kLr) * (m[i] / (std::sqrt(v[i]) + 1e-8f) + 0.1f * ref_p[i]);
      }
      CHECK(p == ref_p);
    }
    CHECK(!opt->wants_averaged_gradients(5));
    CHECK(values(opt->state()[0]) == m);
    CHECK(values(opt->state()[1]) == v);
  });
}

TEST_CASE("onebit adam: freeze_step below 2 acts as 2 (DeepSpeed checks it from the second step)") {
  run_ranks(1, [](ProcessGroup& g) {
    for (int64_t f : {0, 1, 2}) {
      auto opt = make_optimizer(onebit(f), kN, {}, &g);
      CHECK(opt->wants_averaged_gradients(2));
      CHECK(!opt->wants_averaged_gradients(3));
    }
  });
}

TEST_CASE("onebit adam: after freeze_step v is frozen and m is the compressed average, the same on every rank") {
  for (int world = 1; world <= 3; ++world) {
    INFO("world size ", world);
    run_ranks(world, [world](ProcessGroup& g) {
      const int64_t freeze = 3;
      auto opt = make_optimizer(onebit(freeze), kN, {}, &g);
      std::vector<size_t> sizes;
      for (const TensorRange& t : kTensors) sizes.push_back(t.size);
      CompressedAllreduce beside(g, sizes);  // what the optimizer's own compression must give
      std::vector<float> p(kN, 0.5f), gr(kN), m_want;
      std::vector<float> v_frozen;
      for (int64_t t = 1; t <= 8; ++t) {
        const bool warmup = t <= freeze;
        CHECK(opt->wants_averaged_gradients(t) == warmup);
        // In the warm-up the engine hands every rank the same averaged gradient.
        for (size_t i = 0; i < kN; ++i) gr[i] = grad(warmup ? 0 : g.rank(), i, t);
        if (!warmup) {
          m_want = values(opt->state()[0]);
          for (size_t i = 0; i < kN; ++i) m_want[i] = 0.9f * m_want[i] + static_cast<float>(1.0 - 0.9) * gr[i];
          if (world > 1) {
            std::vector<float*> buffers;
            for (const TensorRange& r : kTensors) buffers.push_back(m_want.data() + r.offset);
            beside.run(buffers);
          }
        }
        opt->step(p.data(), gr.data(), kN, kTensors, kLr, t);
        if (t == freeze) v_frozen = values(opt->state()[1]);
        if (warmup) continue;
        CHECK(values(opt->state()[1]) == v_frozen);  // bit-frozen
        CHECK(values(opt->state()[0]) == m_want);
        // every rank holds the same m and parameters
        std::vector<float> all(world * kN);
        g.allgather(p.data(), all.data(), kN, DataType::F32);
        size_t differ = 0;
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < kN; ++i) differ += all[r * kN + i] != p[i];
        CHECK(differ == 0);
      }
      // 5 compressed steps, four collectives each; nothing else.
      CHECK(g.comms().stats("alltoall").count == (world > 1 ? 2 * 5 : 0));  // the optimizer's and `beside`'s
      CHECK(g.comms().stats("allreduce").count == 0);
    });
  }
}

TEST_CASE("onebit adam: a checkpoint load zeroes the compression errors") {
  run_ranks(2, [](ProcessGroup& g) {
    auto run = make_optimizer(onebit(2), kN, {}, &g);
    std::vector<float> p(kN, 0.5f), gr(kN);
    for (int64_t t = 1; t <= 5; ++t) {
      for (size_t i = 0; i < kN; ++i) gr[i] = grad(g.rank(), i, t);
      run->step(p.data(), gr.data(), kN, kTensors, kLr, t);
    }
    // A fresh optimizer (zero errors) loaded with the same state must now step exactly as `run`
    // after restored(), and differently from `run` without it.
    auto fresh = make_optimizer(onebit(2), kN, {}, &g);
    for (size_t k = 0; k < 2; ++k) std::ranges::copy(run->state()[k].f32(), fresh->state()[k].f32().begin());
    std::vector<float> p_fresh = p, p_run = p;
    for (size_t i = 0; i < kN; ++i) gr[i] = grad(g.rank(), i, 6);
    std::vector<float> m_before = values(run->state()[0]);
    run->step(p_run.data(), gr.data(), kN, kTensors, kLr, 6);  // errors from steps 3-5 still in it
    std::vector<float> m_with_errors = values(run->state()[0]);
    std::ranges::copy(m_before, run->state()[0].f32().begin());
    run->restored();
    std::vector<float> p_restored = p;
    run->step(p_restored.data(), gr.data(), kN, kTensors, kLr, 6);
    fresh->step(p_fresh.data(), gr.data(), kN, kTensors, kLr, 6);
    CHECK(p_restored == p_fresh);
    CHECK(values(run->state()[0]) == values(fresh->state()[0]));
    CHECK(m_with_errors != values(fresh->state()[0]));  // the errors mattered
  });
}

TEST_CASE("onebit adam: needs the process group") {
  CHECK_THROWS_WITH_AS(make_optimizer(onebit(10), 4), "make_optimizer: OneBitAdam needs the process group",
                       std::invalid_argument);
}
