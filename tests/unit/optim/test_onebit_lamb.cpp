// 1-bit LAMB (DeepSpeed's OnebitLamb): the warm-up is LAMB without bias correction with the EMA of
// the trust ratios (coeff_beta), v_fresh is v at the last warm-up step, scaling_coeff is computed once
// at the start of compression, the factor is clipped to [factor_min, factor_max] and to
// last·(1 ± factor_threshold), and the ranks agree on every step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/thread_ranks.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

using namespace ds;
using ds::test::values;

namespace {

constexpr double kLr = 0.01;
constexpr size_t kN = 10;
const std::vector<TensorRange> kTensors = {{0, 4}, {4, 6}};

OptimizerConfig onebit_lamb(int64_t freeze_step, double factor_threshold = 0.1) {
  OneBitLambParams l;
  l.freeze_step = freeze_step;
  l.factor_threshold = factor_threshold;
  return test::optimizer_config(OptimizerType::OneBitLamb, kLr, l);
}

float grad(int r, size_t i, int64_t t) {
  return static_cast<float>(std::sin(1.1 * static_cast<double>(i) - 0.6 * static_cast<double>(t) + 0.8 * r)) * 0.2f;
}

std::vector<double>& scalar(Optimizer& o, const char* name) {
  for (auto& [n, v] : o.scalar_state())
    if (n == name) return *v;
  FAIL("no scalar state ", name);
  throw;
}

double norm(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("onebit lamb: warm-up trust ratios, their EMA, and v_fresh taken at freeze_step") {
  run_ranks(1, [](ProcessGroup& g) {
    auto opt = make_optimizer(onebit_lamb(3), kN, {}, &g);
    std::vector<float> p(kN), gr(kN);
    for (size_t i = 0; i < kN; ++i) p[i] = 0.5f + 0.1f * static_cast<float>(i);
    std::vector<double> m(kN, 0.0), v(kN, 0.0), frozen(2, 0.0);
    std::vector<double> p_ref(p.begin(), p.end());
    for (int64_t t = 1; t <= 3; ++t) {
      for (size_t i = 0; i < kN; ++i) gr[i] = grad(0, i, t);
      opt->step(p.data(), gr.data(), kN, kTensors, kLr, t);
      if (t == 1) continue;  // the set-up step
      for (size_t k = 0; k < kTensors.size(); ++k) {
        std::vector<double> u, w;
        for (size_t i = kTensors[k].offset; i < kTensors[k].offset + kTensors[k].size; ++i) {
          m[i] = 0.9 * m[i] + 0.1 * gr[i];
          v[i] = 0.999 * v[i] + 0.001 * gr[i] * gr[i];
          u.push_back(m[i] / (std::sqrt(v[i]) + 1e-8));
          w.push_back(p_ref[i]);
        }
        const double c = std::clamp(norm(w) / norm(u), 0.01, 10.0);
        frozen[k] = 0.9 * frozen[k] + 0.1 * c;
        for (size_t j = 0; j < u.size(); ++j) p_ref[kTensors[k].offset + j] -= kLr * c * u[j];
      }
      const auto& fresh = values(opt->state()[2]);
      if (t == 2) CHECK(std::all_of(fresh.begin(), fresh.end(), [](float x) { return x == 0.0f; }));
      if (t == 3) CHECK(fresh == values(opt->state()[1]));  // v_fresh = v at step F
    }
    for (size_t k = 0; k < 2; ++k) test::check_close(scalar(*opt, "lamb_coeff_freeze")[k], frozen[k], 1e-5);
    for (size_t i = 0; i < kN; ++i) test::check_close(p[i], p_ref[i], 1e-5);
    CHECK(scalar(*opt, "scaling_coeff").empty());
    CHECK(!opt->wants_averaged_gradients(4));
  });
}

TEST_CASE("onebit lamb: scaling_coeff once, the factor's clips, the ranks in step") {
  for (double threshold : {0.1, 100.0}) {
    INFO("factor_threshold ", threshold);
    run_ranks(2, [threshold](ProcessGroup& g) {
      auto opt = make_optimizer(onebit_lamb(3, threshold), kN, {}, &g);
      std::vector<float> p(kN, 0.5f), gr(kN), both(2 * kN);
      std::vector<double> scale;
      double last = 1.0;
      for (int64_t t = 1; t <= 9; ++t) {
        const bool averaged = opt->wants_averaged_gradients(t);
        for (size_t i = 0; i < kN; ++i) gr[i] = grad(averaged ? 0 : g.rank(), i, t);
        const std::vector<float> m_before = values(opt->state()[0]);
        opt->step(p.data(), gr.data(), kN, kTensors, kLr, t);
        g.allgather(p.data(), both.data(), kN, DataType::F32);
        CHECK(std::equal(both.begin(), both.begin() + kN, both.begin() + kN));
        if (averaged) continue;
        if (t == 4) {  // mean RMS of the momenta over each one's, from the warm-up's last m
          scale = scalar(*opt, "scaling_coeff");
          std::vector<double> rms;
          for (const TensorRange& r : kTensors) {
            double s = 0.0;
            for (size_t i = r.offset; i < r.offset + r.size; ++i) s += static_cast<double>(m_before[i]) * m_before[i];
            rms.push_back(std::sqrt(s / static_cast<double>(r.size)));
          }
          for (size_t k = 0; k < 2; ++k) test::check_close(scale[k], (rms[0] + rms[1]) / 2 / rms[k], 1e-6);
        }
        CHECK(scalar(*opt, "scaling_coeff") == scale);  // computed once
        const double f = scalar(*opt, "last_factor")[0];
        CHECK(f >= 0.5);
        CHECK(f <= 4.0);
        CHECK(f >= last * (1.0 - threshold) - 1e-12);
        CHECK(f <= last * (1.0 + threshold) + 1e-12);
        last = f;
      }
    });
  }
}
