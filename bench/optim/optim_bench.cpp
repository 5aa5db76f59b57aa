// bench/optim's sides "ours" and "ours-unfused": Gparam/s of dsworker's AdamW step (runtime/optim) on N parameters
// at the OpenMP thread count of the environment, and the bytes-moved bound at that thread count.
//   optim_bench --params N --steps S [--bf16-states] [--mixed bf16|fp16 [--unfused]]
// fp32 by default: parameters, gradients and moments in fp32. --mixed: the mixed-precision step of the engine,
// an fp32 master with 16-bit gradients (loss-scaled by 1024) and the model's 16-bit parameters: fused (the
// gradients scaled as Adam reads them, the 16-bit parameters written as it updates the master), or with
// --unfused as separate passes (gradients widened into fp32 and scaled, the step, the master rounded into the
// 16-bit parameters), as the engine runs optimizers that do not fuse.
// Prints one JSON line: {"side": ..., "mode": ..., "threads": T, "gparams_per_s": G, "median_ms": M,
// "bound_gparams_per_s": B}.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "amp/half.h"
#include "amp/storage.h"
#include "cpu/convert.h"
#include "optim/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The bytes-moved bound: best of 5 passes of a trivial kernel with AdamW's memory traffic (reads p, g, m, v
// and writes p, m, v in place: 28 bytes per element), in elements per second.
double bound_elems_per_s(size_t n) {
  std::vector<float> pv(n, 1.0f), gv(n, 1e-3f), mv(n, 0.0f), vv(n, 0.0f);
  float* __restrict p = pv.data();
  const float* __restrict g = gv.data();
  float* __restrict m = mv.data();
  float* __restrict v = vv.data();
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto start = Clock::now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) {
      m[i] += g[i];
      v[i] += g[i];
      p[i] -= g[i];
    }
    best = std::max(best, static_cast<double>(n) / seconds_since(start));
  }
  if (mv[n / 2] <= 0.0f) std::fprintf(stderr, "bound check failed\n");
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t params = 50'000'000;
  int steps = 20;
  bool bf16_states = false, unfused = false;
  std::string mixed;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--params" && i + 1 < argc) params = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (arg == "--bf16-states") bf16_states = true;
    else if (arg == "--mixed" && i + 1 < argc && (std::string(argv[i + 1]) == "bf16" || std::string(argv[i + 1]) == "fp16"))
      mixed = argv[++i];
    else if (arg == "--unfused") unfused = true;
    else {
      std::fprintf(stderr, "usage: optim_bench [--params N] [--steps S] [--bf16-states] [--mixed bf16|fp16 [--unfused]]\n");
      return 2;
    }
  }
  ds::OptimizerConfig config;
  config.type = ds::OptimizerType::AdamW;
  config.lr = 1e-3;
  ds::AdamParams adam;
  adam.weight_decay = 0.01;
  config.params = adam;
  auto optimizer = ds::make_optimizer(config, params, {}, nullptr,
                                      bf16_states ? ds::amp::Storage::BF16 : ds::amp::Storage::F32);
  std::vector<float> p(params), g(params);
  for (size_t i = 0; i < params; ++i) {
    p[i] = static_cast<float>(i % 1000) * 1e-3f;
    g[i] = static_cast<float>(i % 7) * 1e-2f - 0.03f;
  }
  const ds::amp::Storage half = mixed == "fp16" ? ds::amp::Storage::F16 : ds::amp::Storage::BF16;
  constexpr double kLossScale = 1024.0;
  std::vector<uint16_t> g16, p16;  // --mixed: the 16-bit gradients (loss-scaled) and parameters
  if (!mixed.empty()) {
    for (float& x : g) x = static_cast<float>(x * kLossScale);
    g16.resize(params);
    p16.resize(params);
    ds::cpu::from_float(half, g.data(), g16.data(), params);
  }
  auto step = [&](int64_t t) {
    if (mixed.empty()) return optimizer->step(p.data(), g.data(), params, {}, 1e-3, t);
    if (unfused) {
      ds::cpu::to_float(half, g16.data(), g.data(), params);
      for (float& x : g) x = static_cast<float>(x * (1.0 / kLossScale));
      optimizer->step(p.data(), g.data(), params, {}, 1e-3, t);
      ds::cpu::from_float(half, p.data(), p16.data(), params);
      return;
    }
    ds::Segment fused{p.data(), g16.data(), params, ds::amp::Storage::F32, half};
    fused.grad_scale = 1.0 / kLossScale;
    fused.param_copy = p16.data();
    fused.copy_type = half;
    optimizer->step(std::span<const ds::Segment>(&fused, 1), {}, 1e-3, t);
  };
  for (int warm = 1; warm <= 2; ++warm) step(warm);
  std::vector<double> ms;
  for (int s = 0; s < steps; ++s) {
    const auto start = Clock::now();
    step(3 + s);
    ms.push_back(seconds_since(start) * 1e3);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median_ms = sorted[sorted.size() / 2];
  std::printf("{\"side\": \"%s\", \"mode\": \"%s\", \"threads\": %d, \"params\": %zu, \"gparams_per_s\": %.4f, "
              "\"median_ms\": %.3f, \"bound_gparams_per_s\": %.4f}\n",
              unfused ? "ours-unfused" : "ours", mixed.empty() ? "fp32" : mixed.c_str(), omp_get_max_threads(), params,
              static_cast<double>(params) / (median_ms / 1e3) / 1e9, median_ms, bound_elems_per_s(params) / 1e9);
  return 0;
}
