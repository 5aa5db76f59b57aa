// kernels/cuda's small layers (elementwise.cuh), conversions (convert.cuh) and gradient checks (norm.cuh)
// on the SIMT emulator against kernels/cpu and runtime/amp: bias, residual, ReLU, embedding, the unscale
// and the 16-bit conversions bit for bit against the CPU (same order of additions), the sums also within
// rounding of the double references; Σ x² within a few
// roundings of the CPU's double sum; inf and NaN found wherever they sit. Small grids, so every
// grid-stride loop wraps.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "amp/half.h"
#include "amp/storage.h"
#include "cpu/activation.h"
#include "cpu/bias.h"
#include "cpu/convert.h"
#include "cpu/elementwise.h"
#include "cpu/embedding.h"
#include "cuda/convert.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/norm.cuh"

namespace {

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Element kernels have no cooperation between threads: one order suffices (the reductions below run both).
void launch(unsigned grid, unsigned block, const std::function<void()>& kernel) { ds::simt::launch(grid, block, {}, kernel); }

}  // namespace

TEST_CASE("cuda bias add and fill, residual add: the CPU's bits") {
  std::mt19937 rng(3);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {65, 3}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const auto y0 = random_floats(rng, rows * cols), bias = random_floats(rng, cols), x = random_floats(rng, rows * cols);
    auto cpu_y = y0, gpu_y = y0;
    ds::cpu::bias_add(cpu_y.data(), bias.data(), rows, cols);
    launch(2, 32, [&] { ds::cuda::bias_add_kernel(gpu_y.data(), bias.data(), rows, cols); });
    CHECK(gpu_y == cpu_y);
    auto cpu_fill = y0, gpu_fill = y0;
    ds::cpu::bias_fill(cpu_fill.data(), bias.data(), rows, cols);
    launch(2, 32, [&] { ds::cuda::bias_fill_kernel(gpu_fill.data(), bias.data(), rows, cols); });
    CHECK(gpu_fill == cpu_fill);
    ds::cpu::add_into(cpu_y.data(), x.data(), rows * cols);
    launch(2, 32, [&] { ds::cuda::add_into_kernel(gpu_y.data(), x.data(), rows * cols); });
    CHECK(gpu_y == cpu_y);
    const auto dbias0 = random_floats(rng, cols);
    auto cpu_db = dbias0, gpu_db = dbias0, ref_db = dbias0;
    ds::cpu::bias_grad(y0.data(), cpu_db.data(), rows, cols);
    ds::cpu::bias_grad_reference(y0.data(), ref_db.data(), rows, cols);
    launch(static_cast<unsigned>((cols + 31) / 32), 32, [&] { ds::cuda::bias_grad_kernel(y0.data(), gpu_db.data(), rows, cols); });
    CHECK(gpu_db == cpu_db);
    for (int64_t c = 0; c < cols; ++c) CHECK(std::fabs(gpu_db[c] - ref_db[c]) <= 1e-5f * (1.0f + std::fabs(ref_db[c])));
  }
}

TEST_CASE("cuda embedding forward and backward: the CPU's bits, repeated tokens included") {
  std::mt19937 rng(4);
  const int64_t B = 3, T = 5, C = 37, vocab = 11;
  std::vector<int32_t> tokens(B * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 4) % 7);  // repeats
  const auto wte = random_floats(rng, vocab * C), wpe = random_floats(rng, T * C), dout = random_floats(rng, B * T * C);
  std::vector<float> cpu_out(B * T * C), gpu_out(B * T * C, NAN);
  ds::cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), cpu_out.data(), B, T, C, vocab);
  launch(3, 64, [&] { ds::cuda::embedding_forward_kernel(tokens.data(), wte.data(), wpe.data(), gpu_out.data(), B * T, T, C, vocab); });
  CHECK(gpu_out == cpu_out);

  auto cpu_dwte = random_floats(rng, vocab * C), cpu_dwpe = random_floats(rng, T * C);
  auto gpu_dwte = cpu_dwte, gpu_dwpe = cpu_dwpe, ref_dwte = cpu_dwte, ref_dwpe = cpu_dwpe;
  ds::cpu::embedding_backward(tokens.data(), dout.data(), cpu_dwte.data(), cpu_dwpe.data(), B, T, C, vocab);
  ds::cpu::embedding_backward_reference(tokens.data(), dout.data(), ref_dwte.data(), ref_dwpe.data(), B, T, C, vocab);
  launch(static_cast<unsigned>((T * C + 31) / 32), 32, [&] { ds::cuda::embedding_backward_wpe_kernel(dout.data(), gpu_dwpe.data(), B, T, C); });
  CHECK(gpu_dwpe == cpu_dwpe);
  // dwte over 1, 3 and 4 token groups (grid y), the threads in both orders: each token's positions add up
  // in order in one group, so every split gives the CPU's bits.
  const auto dwte0 = gpu_dwte;
  for (unsigned groups : {1u, 3u, 4u})
    for (auto order : {ds::simt::Order::forward, ds::simt::Order::reverse}) {
      CAPTURE(groups);
      ds::simt::LaunchOptions o;
      o.order = order;
      gpu_dwte = dwte0;
      ds::simt::launch(ds::simt::dim3(1, groups), 64, o, [&] {
        ds::cuda::embedding_backward_wte_kernel(tokens.data(), dout.data(), gpu_dwte.data(), B * T, C, vocab);
      });
      CHECK(gpu_dwte == cpu_dwte);
    }
  for (size_t i = 0; i < ref_dwte.size(); ++i) CHECK(std::fabs(gpu_dwte[i] - ref_dwte[i]) <= 1e-5f * (1.0f + std::fabs(ref_dwte[i])));

  tokens[4] = static_cast<int32_t>(vocab);  // out of range: its row is NaN, the others unchanged
  launch(3, 64, [&] { ds::cuda::embedding_forward_kernel(tokens.data(), wte.data(), wpe.data(), gpu_out.data(), B * T, T, C, vocab); });
  for (int64_t i = 0; i < B * T * C; ++i) {
    if (i / C == 4) CHECK(std::isnan(gpu_out[i]));
    else CHECK(gpu_out[i] == cpu_out[i]);
  }
}

TEST_CASE("cuda sum of squares within rounding of the CPU's double sum, both thread orders alike") {
  std::mt19937 rng(5);
  for (int64_t n : {1, 31, 1000, 70001}) {
    CAPTURE(n);
    auto x = random_floats(rng, static_cast<size_t>(n));
    x[0] = 1e18f;  // a large element: squares beyond fp32's range still add up in double
    const double cpu = ds::cpu::sum_squares(ds::amp::Storage::F32, x.data(), static_cast<size_t>(n), 0.5);
    double results[2];
    for (auto order : {ds::simt::Order::forward, ds::simt::Order::reverse}) {
      ds::simt::LaunchOptions o;
      o.order = order;
      const unsigned blocks = 5;
      std::vector<double> partial(blocks, NAN);
      double total = 0.5;  // accumulated onto
      ds::simt::launch(blocks, 64, o, [&] { ds::cuda::sum_squares_partial_kernel(x.data(), n, partial.data()); });
      ds::simt::launch(1, 32, o, [&] { ds::cuda::sum_partials_kernel(partial.data(), blocks, &total); });
      results[order == ds::simt::Order::reverse] = total;
    }
    CHECK(results[0] == results[1]);
    CHECK(std::fabs(results[0] - cpu) <= 1e-13 * cpu);
  }
}

TEST_CASE("cuda nonfinite check finds inf and NaN anywhere and leaves the flag alone otherwise") {
  std::mt19937 rng(6);
  const int64_t n = 3001;
  const auto clean = random_floats(rng, n);
  auto flag_of = [&](const std::vector<float>& x) {
    int32_t flag = 0;
    ds::simt::launch(3, 64, {}, [&] { ds::cuda::nonfinite_kernel(x.data(), n, &flag); });
    return flag;
  };
  CHECK(flag_of(clean) == 0);
  for (int64_t at : {int64_t{0}, int64_t{1234}, n - 1})
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), NAN}) {
      CAPTURE(at);
      CAPTURE(bad);
      auto x = clean;
      x[at] = bad;
      CHECK(flag_of(x) == 1);
    }
}

namespace {

// Values that exercise 16-bit rounding: ties, the edges of each format's range, denormals, ±0, ±inf, NaN.
std::vector<float> conversion_inputs(std::mt19937& rng) {
  std::vector<float> x{0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 6e-8f, 3e-8f, 1e-40f,
                       3.0e38f, 3.4e38f, -3.4e38f, 1.00390625f, 1.01171875f, 1.0009765625f, 2049.0f,
                       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), NAN};
  std::uniform_real_distribution<float> log_scale(-30.0f, 30.0f), sign(-1.0f, 1.0f);
  for (int i = 0; i < 3000; ++i) x.push_back(std::copysign(std::exp(log_scale(rng)), sign(rng)));
  return x;
}

}  // namespace

TEST_CASE("cuda relu, unscale, 16-bit conversions and rounding: the CPU's bits") {
  std::mt19937 rng(8);
  const auto x = conversion_inputs(rng);
  const auto n = static_cast<int64_t>(x.size());
  const auto dy = random_floats(rng, x.size());
  std::vector<float> cpu(x.size()), gpu(x.size());
  ds::cpu::relu_forward(x.data(), cpu.data(), n);
  launch(3, 64, [&] { ds::cuda::relu_forward_kernel(x.data(), gpu.data(), n); });
  CHECK(std::memcmp(cpu.data(), gpu.data(), 4 * x.size()) == 0);  // NaN passes through alike
  ds::cpu::relu_backward(x.data(), dy.data(), cpu.data(), n);
  launch(3, 64, [&] { ds::cuda::relu_backward_kernel(x.data(), dy.data(), gpu.data(), n); });
  CHECK(std::memcmp(cpu.data(), gpu.data(), 4 * x.size()) == 0);

  cpu = x;
  gpu = x;
  ds::cpu::scale(ds::amp::Storage::F32, cpu.data(), x.size(), 1.0 / 65536.0 * 3.0);
  launch(3, 64, [&] { ds::cuda::scale_kernel(gpu.data(), n, 1.0 / 65536.0 * 3.0); });
  CHECK(std::memcmp(cpu.data(), gpu.data(), 4 * x.size()) == 0);

  for (auto type : {ds::amp::Half::BF16, ds::amp::Half::F16}) {
    CAPTURE(static_cast<int>(type));
    std::vector<uint16_t> cpu_h(x.size()), gpu_h(x.size());
    ds::cpu::from_float(type, x.data(), cpu_h.data(), x.size());
    launch(3, 64, [&] { ds::cuda::float_to_half_kernel(type, x.data(), gpu_h.data(), n); });
    CHECK(cpu_h == gpu_h);
    ds::cpu::to_float(type, cpu_h.data(), cpu.data(), x.size());
    launch(3, 64, [&] { ds::cuda::half_to_float_kernel(type, cpu_h.data(), gpu.data(), n); });
    CHECK(std::memcmp(cpu.data(), gpu.data(), 4 * x.size()) == 0);
    ds::cpu::accumulate(type, dy.data(), cpu_h.data(), x.size());
    launch(3, 64, [&] { ds::cuda::half_accumulate_kernel(type, dy.data(), gpu_h.data(), n); });
    CHECK(cpu_h == gpu_h);
    cpu = x;
    gpu = x;
    const auto storage = type == ds::amp::Half::BF16 ? ds::amp::Storage::BF16 : ds::amp::Storage::F16;
    ds::cpu::round_to(storage, cpu.data(), x.size());
    launch(3, 64, [&] { ds::cuda::round_to_half_kernel(type, gpu.data(), n); });
    CHECK(std::memcmp(cpu.data(), gpu.data(), 4 * x.size()) == 0);
  }
}
