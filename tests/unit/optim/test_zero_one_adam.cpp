// 0/1 Adam (DeepSpeed's ZeroOneAdam): the variance-update steps T_v and the sync steps follow
// DeepSpeed's schedules, derived from the step alone (so after a checkpoint load too); with one rank
// and a constant lr the local steps plus syncs keep the plain frozen-variance trajectory, a sync
// setting m to the mean momentum since the last one; with two ranks the parameters differ between
// syncs and agree after each.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "comm/thread_ranks.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

using namespace ds;
using ds::test::values;

namespace {

constexpr double kLr = 0.01;
constexpr size_t kN = 12;
const std::vector<TensorRange> kTensors = {{0, 4}, {4, 8}};

OptimizerConfig zero_one(int64_t var_freeze, int64_t var_scaler, int64_t local_scaler, int64_t clipper) {
  ZeroOneAdamParams z;
  z.var_freeze_step = var_freeze;
  z.var_update_scaler = var_scaler;
  z.local_step_scaler = local_scaler;
  z.local_step_clipper = clipper;
  return test::optimizer_config(OptimizerType::ZeroOneAdam, kLr, z);
}

float grad(int r, size_t i, int64_t t) {
  return static_cast<float>(std::cos(0.9 * static_cast<double>(i) + 0.4 * static_cast<double>(t) + r)) * 0.3f;
}

}  // namespace

TEST_CASE("zero one adam: variance steps double their interval every var_update_scaler updates") {
  run_ranks(1, [](ProcessGroup& g) {
    auto opt = make_optimizer(zero_one(20, 2, 100, 16), kN, {}, &g);
    // DeepSpeed: I = 1 for steps 2, 3; then I = 2 (4, 6), I = 4 (8, 12), I = 8 (16); local steps from 22.
    std::vector<int64_t> averaged;
    for (int64_t t = 1; t <= 30; ++t)
      if (opt->wants_averaged_gradients(t)) averaged.push_back(t);
    CHECK(averaged == std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16});
    // Asked out of order (a checkpoint load at step 13), the same answers.
    auto loaded = make_optimizer(zero_one(20, 2, 100, 16), kN, {}, &g);
    CHECK(loaded->wants_averaged_gradients(16));
    CHECK(!loaded->wants_averaged_gradients(14));
    CHECK(loaded->wants_averaged_gradients(6));
    CHECK(!loaded->wants_averaged_gradients(22));
  });
}

TEST_CASE("zero one adam: one rank, constant lr: local steps and syncs keep the frozen-variance trajectory") {
  run_ranks(1, [](ProcessGroup& g) {
    // Local steps from step 4; sync interval 1 for steps 4-5, 2 for 6-7, then 4 (clipper): syncs at
    // 4, 5, 6, 8, 12, 16.
    auto opt = make_optimizer(zero_one(2, 16, 2, 4), kN, {}, &g);
    std::vector<float> p(kN, 0.25f), gr(kN);
    for (int64_t t = 1; t <= 3; ++t) {
      for (size_t i = 0; i < kN; ++i) gr[i] = grad(0, i, t);
      opt->step(p.data(), gr.data(), kN, kTensors, kLr, t);
    }
    const std::vector<float> v = values(opt->state()[1]);
    const std::vector<float> m0 = values(opt->state()[0]);
    std::vector<double> m(m0.begin(), m0.end());
    std::vector<double> p_ref(p.begin(), p.end()), m_sum(kN, 0.0);
    int since_sync = 0;
    double worst_p = 0.0, worst_m = 0.0;
    std::vector<int64_t> syncs;
    for (int64_t t = 4; t <= 17; ++t) {
      CHECK(!opt->wants_averaged_gradients(t));
      for (size_t i = 0; i < kN; ++i) gr[i] = grad(0, i, t);
      opt->step(p.data(), gr.data(), kN, kTensors, kLr, t);
      ++since_sync;
      for (size_t i = 0; i < kN; ++i) {
        m[i] = 0.9 * m[i] + 0.1 * gr[i];
        m_sum[i] += m[i];
        p_ref[i] -= kLr * m[i] / (std::sqrt(static_cast<double>(v[i])) + 1e-8);
      }
      const int64_t interval = t < 6 ? 1 : t < 8 ? 2 : 4;
      if (t % interval == 0) {
        syncs.push_back(t);
        for (size_t i = 0; i < kN; ++i) m[i] = m_sum[i] / since_sync;  // the mean momentum of the interval
        std::fill(m_sum.begin(), m_sum.end(), 0.0);
        since_sync = 0;
      }
      for (size_t i = 0; i < kN; ++i) {
        worst_p = std::max(worst_p, std::abs(p[i] - p_ref[i]) / std::abs(p_ref[i]));
        worst_m = std::max(worst_m, std::abs(values(opt->state()[0])[i] - m[i]) / (std::abs(m[i]) + 1e-3));
      }
    }
    CHECK(values(opt->state()[1]) == v);  // frozen
    CHECK(syncs == std::vector<int64_t>{4, 5, 6, 8, 12, 16});
    MESSAGE("worst relative error: parameters ", worst_p, ", momentum ", worst_m);
    CHECK(worst_p < 1e-5);
    CHECK(worst_m < 1e-4);
  });
}

TEST_CASE("zero one adam: two ranks agree after each sync and differ between them") {
  run_ranks(2, [](ProcessGroup& g) {
    auto opt = make_optimizer(zero_one(2, 16, 2, 4), kN, {}, &g);
    std::vector<float> p(kN, 0.25f), gr(kN), other(2 * kN);
    for (int64_t t = 1; t <= 12; ++t) {
      const bool averaged = opt->wants_averaged_gradients(t);
      for (size_t i = 0; i < kN; ++i) gr[i] = grad(averaged ? 0 : g.rank(), i, t);
      const int64_t alltoalls = g.comms().stats("alltoall").count;
      opt->step(p.data(), gr.data(), kN, kTensors, kLr, t);
      const bool synced = g.comms().stats("alltoall").count > alltoalls;
      g.allgather(p.data(), other.data(), kN, DataType::F32);
      const bool same = std::equal(other.begin(), other.begin() + kN, other.begin() + kN);
      if (t <= 3) CHECK(same);  // averaged gradients (steps 1-3: set-up and variance updates)
      if (t >= 4) CHECK(synced == (t == 4 || t == 5 || t == 6 || t == 8 || t == 12));
      if (t >= 4) CHECK(same == synced);
    }
  });
}
