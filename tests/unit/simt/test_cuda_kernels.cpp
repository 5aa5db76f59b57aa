// kernels/cuda's kernels on the SIMT emulator against kernels/cpu's references, at odd shapes and
// block sizes, in forward and reverse thread order (which must agree bit for bit: the reductions
// have a fixed order). Tolerance atol + rtol·|ref| with fp32 accumulation; the worst error is printed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cpu/adagrad.h"
#include "cpu/rmsprop.h"
#include "cpu/cross_entropy.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/lion.h"
#include "cpu/sgd_lamb.h"
#include "cuda/adam.cuh"
#include "cuda/attention.cuh"
#include "cuda/cross_entropy.cuh"
#include "cuda/gelu.cuh"
#include "cuda/lamb.cuh"
#include "cuda/launch.h"
#include "cuda/launch_shape.h"
#include "cuda/layernorm.cuh"
#include "cuda/norm.cuh"
#include "cuda/one_state.cuh"
#include "cuda/sgd.cuh"
#include "optim/optimizers.h"

using ds::simt::LaunchOptions;
using ds::simt::Order;
constexpr ds::amp::Half kBf16 = ds::amp::Half::BF16;  // (the type, unread without a 16-bit output)

TEST_CASE("cuda layernorm forward on the emulator matches the CPU reference") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  double worst = 0;
  for (int64_t rows : {1, 3}) {
    for (int64_t dim : {1, 31, 33, 100, 769}) {
      for (unsigned threads : {32u, 64u, 256u}) {
        CAPTURE(rows);
        CAPTURE(dim);
        CAPTURE(threads);
        std::vector<float> x(rows * dim), gamma(dim), beta(dim);
        for (auto& v : x) v = 3.0f + 2.0f * normal(rng);  // a common offset: the two-pass variance matters
        for (auto& v : gamma) v = 1.0f + 0.1f * normal(rng);
        for (auto& v : beta) v = 0.1f * normal(rng);
        std::vector<float> ref(x.size()), ref_stats(2 * rows);
        ds::cpu::layernorm_forward_reference(x.data(), gamma.data(), beta.data(), ref.data(), ref_stats.data(), rows,
                                             dim, 1e-5f);
        std::vector<float> y[2], stats[2];
        for (Order order : {Order::forward, Order::reverse}) {
          auto& out = y[order == Order::reverse];
          auto& st = stats[order == Order::reverse];
          out.assign(x.size(), NAN);
          st.assign(2 * rows, NAN);
          LaunchOptions o;
          o.order = order;
          ds::simt::launch(static_cast<unsigned>(rows), threads, o, [&] {
            ds::cuda::layernorm_forward_kernel(x.data(), gamma.data(), beta.data(), out.data(), st.data(), dim, 1e-5f);
          });
        }
        CHECK(y[0] == y[1]);
        CHECK(stats[0] == stats[1]);
        for (size_t i = 0; i < x.size(); ++i) {
          const double err = std::fabs(static_cast<double>(y[0][i]) - ref[i]);
          worst = std::max(worst, err);
          REQUIRE(err <= 2e-5 + 2e-5 * std::fabs(ref[i]));
        }
        for (size_t i = 0; i < stats[0].size(); ++i) REQUIRE(std::fabs(stats[0][i] - ref_stats[i]) <= 1e-5 + 1e-5 * std::fabs(ref_stats[i]));
      }
    }
  }
  std::printf("cuda layernorm forward (emulated) vs reference: worst |error| %.3g\n", worst);
}

TEST_CASE("cuda launchers: without a GPU a launch is an error naming CUDA's error") {
  std::vector<float> x(4, 1.0f), gamma(4, 1.0f), beta(4, 0.0f), y(4), stats(2);
  auto launch = [&] { ds::cuda::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), stats.data(), 1, 4, 1e-5f, nullptr); };
  if (!ds::cuda::built_with_cuda()) {
    CHECK_THROWS_WITH_AS(launch(), "cuda: layernorm_forward: dsrun was built without CUDA", std::runtime_error);
    return;
  }
  int gpus = 0;
  try {
    gpus = ds::cuda::device_count();
  } catch (const std::runtime_error& e) {
    MESSAGE("no usable GPU: " << std::string(e.what()));
    CHECK(std::string(e.what()).rfind("cuda: cudaGetDeviceCount: cudaError", 0) == 0);
  }
  if (gpus > 0) {
    MESSAGE("a GPU is visible: this case is for machines without one (the host buffers are not device memory)");
    return;
  }
  CHECK_THROWS_WITH_AS(launch(), doctest::Contains("cuda: layernorm_forward launch: cudaError"), std::runtime_error);
}

TEST_CASE("cuda adam on the emulator gives the CPU optimizer's bits") {
  // offset 0: 16-byte aligned arrays (four elements per access, then the last n % 4 one at a time);
  // offset 1: misaligned ones (one element at a time throughout)
  for (size_t offset : {0, 1})
  for (bool decoupled : {true, false}) {
    CAPTURE(offset);
    CAPTURE(decoupled);
    const size_t n = 1000 + 37;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(n), g(n);
    for (auto& v : p) v = normal(rng);
    std::vector<float> cpu_p = p, gpu_p_buffer(offset), gpu_m_buffer(n + offset, 0.0f), gpu_v_buffer(n + offset, 0.0f),
                       g_buffer(n + offset);
    gpu_p_buffer.insert(gpu_p_buffer.end(), p.begin(), p.end());
    float *gpu_p = gpu_p_buffer.data() + offset, *gpu_m = gpu_m_buffer.data() + offset,
          *gpu_v = gpu_v_buffer.data() + offset, *g_device = g_buffer.data() + offset;
    for (const float* a : {gpu_p, gpu_m, gpu_v, g_device}) REQUIRE(ds::cuda::aligned16(a) == (offset == 0));
    ds::AdamParams params;
    params.weight_decay = 0.01;
    params.adam_w_mode = decoupled;
    auto adam = ds::optim::make_adam(params, n, ds::amp::Storage::F32);
    for (int64_t step = 1; step <= 3; ++step) {
      for (auto& v : g) v = normal(rng);
      const double lr = 1e-3;
      ds::Segment segment{cpu_p.data(), g.data(), n};
      adam->step(std::span<const ds::Segment>(&segment, 1), {}, lr, step);
      const float beta1 = 0.9f, beta2 = 0.999f, lr_f = static_cast<float>(lr), wd = 0.01f;
      const float bc1 = ds::optim::bias_correction(beta1, step), bc2 = ds::optim::bias_correction(beta2, step);
      const ds::cpu::AdamArgs args{beta1, beta2, 1e-8f, wd, -lr_f / bc1, 1.0f / std::sqrt(bc2), -lr_f * wd};
      std::copy(g.begin(), g.end(), g_device);
      ds::simt::launch(3, 64, {}, [&] {  // a grid-stride loop: fewer threads than elements (and than groups of 4)
        if (decoupled) ds::cuda::adam_kernel<true>(gpu_p, g_device, gpu_m, gpu_v, n, args);
        else ds::cuda::adam_kernel<false>(gpu_p, g_device, gpu_m, gpu_v, n, args);
      });
    }
    for (size_t i = 0; i < n; ++i)
      if (gpu_p[i] != cpu_p[i]) {
        MESSAGE("first difference at " << i << ": " << gpu_p[i] << " vs " << cpu_p[i]);
        break;
      }
    CHECK(std::equal(gpu_p, gpu_p + n, cpu_p.data()));
    const auto state = adam->state();
    CHECK(std::equal(gpu_m, gpu_m + n, static_cast<const float*>(state[0].data)));
    CHECK(std::equal(gpu_v, gpu_v + n, static_cast<const float*>(state[1].data)));
  }
}

namespace {

// A multi-tensor kernel's launch over its blocks (segment_blocks), 64 threads each, the blocks in `order`.
template <class Kernel>
void launch_blocks(size_t blocks, Order order, Kernel kernel) {
  LaunchOptions o;
  o.order = order;
  ds::simt::launch(static_cast<unsigned>(blocks), 64, o, kernel);
}

// Tensors of `sizes` elements side by side in one buffer, `gap` elements after each (a block running past its
// tensor writes there; a gap of one shifts the next tensor's alignment): where each starts, and the length.
struct SideBySide {
  std::vector<int64_t> starts;
  int64_t total = 0;
};
SideBySide side_by_side(const std::vector<int64_t>& sizes, int64_t gap) {
  SideBySide laid;
  for (int64_t n : sizes) {
    laid.starts.push_back(laid.total);
    laid.total += n + gap;
  }
  return laid;
}

// n values drawn from the standard normal distribution with `seed`.
std::vector<float> normal_values(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (auto& x : values) x = normal(rng);
  return values;
}

}  // namespace

TEST_CASE("cuda multi-tensor adam: one launch gives each tensor's one-launch bits, at any size and alignment") {
  // Tensors of 0, 1, 37, 4096 (one block's worth), 4099 and 9000 elements (three blocks) side by side in
  // flat arrays, some starting off 16-byte alignment: every element as the one-tensor kernel leaves it, in
  // both block orders.
  const std::vector<int64_t> sizes = {0, 1, 37, 4096, 4099, 9000};
  const auto [starts, total] = side_by_side(sizes, 1);
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(total), g(total), m(total), v(total);
  for (auto* a : {&p, &g, &m, &v})
    for (auto& x : *a) x = normal(rng);
  for (auto& x : v) x = std::fabs(x);
  const ds::cpu::AdamArgs args{0.9f, 0.999f, 1e-8f, 0.01f, -1e-3f, 1.0f, -1e-5f};
  for (bool decoupled : {true, false}) {
    CAPTURE(decoupled);
    std::vector<float> want_p = p, want_m = m, want_v = v;
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int64_t at = starts[s];
      ds::simt::launch(2, 64, {}, [&] {
        if (decoupled) ds::cuda::adam_kernel<true>(&want_p[at], &g[at], &want_m[at], &want_v[at], sizes[s], args);
        else ds::cuda::adam_kernel<false>(&want_p[at], &g[at], &want_m[at], &want_v[at], sizes[s], args);
      });
    }
    std::vector<ds::cuda::AdamSegment> segments;
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int64_t at = starts[s];
      segments.push_back({&p[at], &g[at], &m[at], &v[at], sizes[s]});
    }
    const auto blocks = ds::cuda::segment_blocks(segments.data(), segments.size());
    CHECK(blocks.size() == 1 + 1 + 1 + 2 + 3);  // none for the empty tensor
    CHECK(ds::cuda::segment_block_count(segments.data(), segments.size()) == blocks.size());
    for (auto order : {Order::forward, Order::reverse}) {
      auto got_p = p, got_m = m, got_v = v;
      for (size_t s = 0; s < sizes.size(); ++s) {
        const int64_t at = starts[s];
        segments[s] = {&got_p[at], &g[at], &got_m[at], &got_v[at], sizes[s]};
      }
      launch_blocks(blocks.size(), order, [&] {
        if (decoupled) ds::cuda::adam_multi_kernel<true>(segments.data(), blocks.data(), args);
        else ds::cuda::adam_multi_kernel<false>(segments.data(), blocks.data(), args);
      });
      CHECK(got_p == want_p);
      CHECK(got_m == want_m);
      CHECK(got_v == want_v);
    }
  }
}

TEST_CASE("cuda multi-tensor rounding and sum of squares: round_to's bits, the double sum within roundings") {
  // Tensors of 0, 3, 4096 and 9001 elements side by side: rounded copies (and one in place) are
  // round_to_half's bits, nothing outside them written; the sum of squares within 1e-12 of the double sum,
  // the same bits in both block orders.
  const std::vector<int64_t> sizes = {0, 3, 4096, 9001};
  const auto [starts, total] = side_by_side(sizes, 1);
  const std::vector<float> src = normal_values(total, 13);
  for (ds::amp::Half type : {ds::amp::Half::BF16, ds::amp::Half::F16}) {
    std::vector<float> want(total, -7.0f), got(total, -7.0f), in_place = src;
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::copy_n(&src[starts[s]], sizes[s], &want[starts[s]]);
      ds::simt::launch(2, 64, {}, [&] { ds::cuda::round_to_half_kernel(type, &want[starts[s]], sizes[s]); });
    }
    std::vector<ds::cuda::RoundSegment> segments;
    for (size_t s = 0; s < sizes.size(); ++s) segments.push_back({&got[starts[s]], &src[starts[s]], sizes[s]});
    segments.push_back({&in_place[starts[3]], &in_place[starts[3]], sizes[3]});
    const auto blocks = ds::cuda::segment_blocks(segments.data(), segments.size());
    ds::simt::launch(static_cast<unsigned>(blocks.size()), 64, {},
                     [&] { ds::cuda::round_multi_kernel(type, segments.data(), blocks.data()); });
    CHECK(got == want);
    CHECK(std::equal(&in_place[starts[3]], &in_place[starts[3]] + sizes[3], &want[starts[3]]));
  }
  std::vector<ds::cuda::SquaresSegment> squares;
  double exact = 0.0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    squares.push_back({&src[starts[s]], sizes[s]});
    for (int64_t i = 0; i < sizes[s]; ++i) exact += static_cast<double>(src[starts[s] + i]) * src[starts[s] + i];
  }
  const auto blocks = ds::cuda::segment_blocks(squares.data(), squares.size());
  double sums[2];
  for (auto order : {Order::forward, Order::reverse}) {
    LaunchOptions o;
    o.order = order;
    std::vector<double> partial(blocks.size(), NAN);
    double sum = 0.25;  // accumulated onto
    ds::simt::launch(static_cast<unsigned>(blocks.size()), 64, o,
                     [&] { ds::cuda::sum_squares_multi_kernel(squares.data(), blocks.data(), partial.data()); });
    ds::simt::launch(1, 64, o, [&] {
      ds::cuda::sum_partials_kernel(partial.data(), static_cast<int64_t>(blocks.size()), &sum);
    });
    sums[order == Order::reverse] = sum;
  }
  CHECK(sums[0] == sums[1]);
  CHECK(std::fabs(sums[0] - 0.25 - exact) <= 1e-12 * exact);
}

TEST_CASE("cuda multi-tensor scaling: scale_kernel's bits in each tensor, nothing between them written") {
  const std::vector<int64_t> sizes = {0, 5, 4096, 8193};
  const auto [starts, total] = side_by_side(sizes, 3);
  const std::vector<float> src = normal_values(total, 17);
  const double factor = 1.0 / 3.0;  // (in double: not fp32's product)
  std::vector<float> want = src;
  for (size_t s = 0; s < sizes.size(); ++s)
    ds::simt::launch(2, 64, {}, [&] { ds::cuda::scale_kernel(&want[starts[s]], sizes[s], factor); });
  std::vector<ds::cuda::ScaleSegment> segments;
  for (auto order : {Order::forward, Order::reverse}) {
    std::vector<float> got = src;
    segments.clear();
    for (size_t s = 0; s < sizes.size(); ++s) segments.push_back({&got[starts[s]], sizes[s]});
    const auto blocks = ds::cuda::segment_blocks(segments.data(), segments.size());
    launch_blocks(blocks.size(), order, [&] { ds::cuda::scale_multi_kernel(segments.data(), blocks.data(), factor); });
    CHECK(got == want);
    CHECK(got != src);
  }
}

TEST_CASE("cuda sgd on the emulator gives the CPU loop's bits: plain, momentum, dampening, Nesterov, first step") {
  const ds::cpu::SgdArgs cases[] = {{0.1f, 0.01f, 0.0f, 1.0f, false, false},
                                    {0.1f, 0.01f, 0.9f, 0.75f, false, true},
                                    {0.1f, 0.0f, 0.9f, 0.75f, false, false},
                                    {0.05f, 0.01f, 0.9f, 1.0f, true, true},
                                    {0.05f, 0.01f, 0.9f, 1.0f, true, false}};
  const size_t n = 1037;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ds::cpu::SgdArgs& a : cases) {
    CAPTURE(a.momentum);
    CAPTURE(a.nesterov);
    CAPTURE(a.first);
    std::vector<float> p(n), g(n), buf(n);
    for (auto* v : {&p, &g, &buf})
      for (float& x : *v) x = normal(rng);
    std::vector<float> cpu_p = p, cpu_buf = buf;
    ds::cpu::sgd_step(cpu_p.data(), ds::amp::Storage::F32, g.data(), ds::amp::Storage::F32, cpu_buf.data(),
                      ds::amp::Storage::F32, n, a);
    ds::cuda::with_sgd_kind(a, [&](auto momentum, auto nesterov, auto first) {
      ds::simt::launch(3, 64, {}, [&] {  // a grid-stride loop: fewer threads than elements
        ds::cuda::sgd_kernel<decltype(momentum)::value, decltype(nesterov)::value, decltype(first)::value>(
            p.data(), g.data(), buf.data(), static_cast<int64_t>(n), a);
      });
    });
    CHECK(p == cpu_p);
    CHECK(buf == cpu_buf);  // untouched without momentum, as on the CPU
  }
}

TEST_CASE("cuda multi-tensor moves: copies, narrowings and widenings with the one-array kernels' bits") {
  // Arrays of 0, 9, 4096 and 5000 elements with gaps between them (left as they were), both block orders.
  const std::vector<int64_t> sizes = {0, 9, 4096, 5000};
  const auto [starts, total] = side_by_side(sizes, 2);
  const std::vector<float> values = normal_values(total, 23);
  for (ds::amp::Half type : {ds::amp::Half::BF16, ds::amp::Half::F16}) {
    std::vector<uint16_t> halves(total);
    ds::simt::launch(3, 64, {}, [&] { ds::cuda::float_to_half_kernel(type, values.data(), halves.data(), total); });
    std::vector<float> widened(total);
    ds::simt::launch(3, 64, {}, [&] { ds::cuda::half_to_float_kernel(type, halves.data(), widened.data(), total); });
    for (auto order : {Order::forward, Order::reverse}) {
      LaunchOptions o;
      o.order = order;
      std::vector<float> copied(total, -5.0f), got_widened(total, -5.0f);
      std::vector<uint16_t> got_halves(total, 0xffff);
      std::vector<ds::cuda::MoveSegment> copies, narrowings, widenings;
      for (size_t s = 0; s < sizes.size(); ++s) {
        const int64_t at = starts[s];
        copies.push_back({&copied[at], &values[at], sizes[s]});
        narrowings.push_back({&got_halves[at], &values[at], sizes[s]});
        widenings.push_back({&got_widened[at], &halves[at], sizes[s]});
      }
      const auto blocks = ds::cuda::segment_blocks(copies.data(), copies.size());
      const auto grid = static_cast<unsigned>(blocks.size());
      using ds::cuda::MoveKind;
      ds::simt::launch(grid, 64, o, [&] { ds::cuda::move_multi_kernel<MoveKind::copy>(type, copies.data(), blocks.data()); });
      ds::simt::launch(grid, 64, o, [&] { ds::cuda::move_multi_kernel<MoveKind::narrow>(type, narrowings.data(), blocks.data()); });
      ds::simt::launch(grid, 64, o, [&] { ds::cuda::move_multi_kernel<MoveKind::widen>(type, widenings.data(), blocks.data()); });
      for (size_t s = 0; s < sizes.size(); ++s) {
        for (int64_t i = starts[s]; i < starts[s] + sizes[s]; ++i) {
          REQUIRE(copied[i] == values[i]);
          REQUIRE(got_halves[i] == halves[i]);
          REQUIRE(got_widened[i] == widened[i]);
        }
        for (int64_t i = starts[s] + sizes[s]; i < starts[s] + sizes[s] + 2; ++i) {  // the gap after it
          REQUIRE(copied[i] == -5.0f);
          REQUIRE(got_halves[i] == 0xffff);
          REQUIRE(got_widened[i] == -5.0f);
        }
      }
    }
  }
}

TEST_CASE("cuda multi-tensor sgd: the CPU loop's bits in each tensor, nothing between them written, both block orders") {
  const ds::cpu::SgdArgs cases[] = {{0.1f, 0.01f, 0.0f, 1.0f, false, false},
                                    {0.1f, 0.01f, 0.9f, 0.75f, false, true},
                                    {0.05f, 0.01f, 0.9f, 1.0f, true, false}};
  const std::vector<int64_t> sizes = {0, 7, 4096, 8195};
  const auto [starts, total] = side_by_side(sizes, 3);
  std::mt19937 rng(19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p0(total), g(total), buf0(total);
  for (auto* v : {&p0, &g, &buf0})
    for (float& x : *v) x = normal(rng);
  for (const ds::cpu::SgdArgs& a : cases) {
    CAPTURE(a.momentum);
    CAPTURE(a.nesterov);
    CAPTURE(a.first);
    std::vector<float> want_p = p0, want_buf = buf0;
    for (size_t s = 0; s < sizes.size(); ++s)
      ds::cpu::sgd_step(&want_p[starts[s]], ds::amp::Storage::F32, &g[starts[s]], ds::amp::Storage::F32,
                        &want_buf[starts[s]], ds::amp::Storage::F32, static_cast<size_t>(sizes[s]), a);
    for (auto order : {Order::forward, Order::reverse}) {
      std::vector<float> p = p0, buf = buf0;
      std::vector<ds::cuda::SgdSegment> segments;
      for (size_t s = 0; s < sizes.size(); ++s)
        segments.push_back({&p[starts[s]], &g[starts[s]], a.momentum != 0.0f ? &buf[starts[s]] : nullptr,
                            sizes[s]});
      const auto blocks = ds::cuda::segment_blocks(segments.data(), segments.size());
      LaunchOptions o;
      o.order = order;
      ds::cuda::with_sgd_kind(a, [&](auto momentum, auto nesterov, auto first) {
        ds::simt::launch(static_cast<unsigned>(blocks.size()), 64, o, [&] {
          ds::cuda::sgd_multi_kernel<decltype(momentum)::value, decltype(nesterov)::value, decltype(first)::value>(
              segments.data(), blocks.data(), a);
        });
      });
      CHECK(p == want_p);
      CHECK(buf == want_buf);
      CHECK(p != p0);
    }
  }
}

namespace {

// The multi-tensor kernel of an optimizer with one state buffer (one_state.cuh) over tensors of 0 to 8195 elements
// side by side, in both block orders: p and s as cpu_step(p, g, s, n) leaves each tensor, the gaps untouched.
// prepare(g, s) may tie the gradients to the state (at a quarter of the elements, say).
template <class Update, class CpuStep, class Prepare>
void check_one_state_kernel(Update update, CpuStep cpu_step, Prepare prepare) {
  const std::vector<int64_t> sizes = {0, 7, 4096, 8195};
  const auto [starts, total] = side_by_side(sizes, 3);
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p0(total), g(total), s0(total);
  for (auto* v : {&p0, &g, &s0})
    for (float& x : *v) x = normal(rng);
  prepare(g, s0);
  std::vector<float> want_p = p0, want_s = s0;
  for (size_t k = 0; k < sizes.size(); ++k)
    cpu_step(&want_p[starts[k]], &g[starts[k]], &want_s[starts[k]], static_cast<size_t>(sizes[k]));
  for (auto order : {Order::forward, Order::reverse}) {
    std::vector<float> p = p0, s = s0;
    std::vector<ds::cuda::OneStateSegment> segments;
    for (size_t k = 0; k < sizes.size(); ++k) segments.push_back({&p[starts[k]], &g[starts[k]], &s[starts[k]], sizes[k]});
    const auto blocks = ds::cuda::segment_blocks(segments.data(), segments.size());
    launch_blocks(blocks.size(), order, [&] { ds::cuda::one_state_multi_kernel(segments.data(), blocks.data(), update); });
    CHECK(p == want_p);
    CHECK(s == want_s);
    CHECK(p != p0);
  }
}

}  // namespace

// Lion's interpolation is exactly 0 where m = −g·(1−β1)/β1: with β1 = 0.5 at every fourth element (g = −m); the
// kernel leaves those parameters only decayed, as the CPU loop does.
TEST_CASE("cuda multi-tensor lion: the CPU loop's bits in each tensor, nothing between them written, both block orders") {
  const ds::cpu::LionArgs cases[] = {{0.01f, 1.0f, 0.9f, 1.0f - 0.9f, 0.99f, 1.0f - 0.99f},
                                     {0.001f, 1.0f - 0.001f * 0.1f, 0.5f, 0.5f, 0.98f, 1.0f - 0.98f}};
  for (const ds::cpu::LionArgs& a : cases) {
    CAPTURE(a.beta1);
    check_one_state_kernel(
        ds::cuda::LionUpdate{a},
        [&](float* p, const float* g, float* m, size_t n) {
          ds::cpu::lion_step(p, ds::amp::Storage::F32, g, ds::amp::Storage::F32, m, ds::amp::Storage::F32, n, a);
        },
        [](std::vector<float>& g, const std::vector<float>& m) {
          for (size_t i = 0; i < g.size(); i += 4) g[i] = -m[i];
        });
  }
}

// Adagrad's first step starts each sum at the initial value whatever the buffer holds (here: random values);
// later steps add to it. A quarter of the gradients are 0.
TEST_CASE("cuda multi-tensor adagrad: the CPU loop's bits in each tensor, first step and later, both block orders") {
  const ds::cpu::AdagradArgs cases[] = {{0.01f, 0.0f, 1e-10f, 0.0f, true},
                                        {0.01f / 1.5f, 0.1f, 1e-8f, 0.25f, true},
                                        {0.003f, 0.01f, 1e-10f, 0.25f, false}};
  for (const ds::cpu::AdagradArgs& a : cases) {
    CAPTURE(a.first);
    CAPTURE(a.weight_decay);
    check_one_state_kernel(
        ds::cuda::AdagradUpdate{a},
        [&](float* p, const float* g, float* sum, size_t n) {
          ds::cpu::adagrad_step(p, ds::amp::Storage::F32, g, ds::amp::Storage::F32, sum, ds::amp::Storage::F32, n, a);
        },
        [](std::vector<float>& g, std::vector<float>& sum) {
          for (float& x : sum) x = x * x;  // a sum of squares
          for (size_t i = 0; i < g.size(); i += 4) g[i] = 0.0f;
        });
  }
}

// Plain RMSprop (its one state: square_avg): the first step starts it at 0 whatever the buffer holds (here: random
// values), later steps decay it. A quarter of the gradients are 0.
TEST_CASE("cuda multi-tensor rmsprop: the CPU loop's bits in each tensor, first step and later, both block orders") {
  const ds::cpu::RmspropArgs cases[] = {{0.01f, 0.99f, 1.0f - 0.99f, 1e-8f, 0.0f, 0.0f, false, true},
                                        {0.003f, 0.9f, 1.0f - 0.9f, 1e-6f, 0.01f, 0.0f, false, false}};
  for (const ds::cpu::RmspropArgs& a : cases) {
    CAPTURE(a.first);
    CAPTURE(a.weight_decay);
    check_one_state_kernel(
        ds::cuda::RmspropUpdate{a},
        [&](float* p, const float* g, float* square_avg, size_t n) {
          ds::cpu::rmsprop_step(p, ds::amp::Storage::F32, g, ds::amp::Storage::F32, ds::cpu::RmspropState{square_avg},
                                ds::amp::Storage::F32, n, a);
        },
        [](std::vector<float>& g, std::vector<float>& square_avg) {
          for (float& x : square_avg) x = x * x;  // an average of squares
          for (size_t i = 0; i < g.size(); i += 4) g[i] = 0.0f;
        });
  }
}

TEST_CASE("cuda lamb on the emulator: the CPU optimizer's moments bit for bit, its parameters to the last bit") {
  // Four tensors in three launches (one of a single element, an empty one, one of three blocks: each
  // tensor's sums gather its blocks' partials from its first_block on); both places of eps; both block and
  // thread orders, which give the same bits.
  const std::vector<ds::TensorRange> tensors{{0, 1037}, {1037, 1}, {1038, 0}, {1038, 9000}};
  const size_t n = 10038;
  const std::vector<float> p0 = normal_values(static_cast<int64_t>(n), 5);
  for (bool inside : {false, true}) {
    CAPTURE(inside);
    ds::LambParams params;
    params.weight_decay = 0.01;
    params.eps_inside_sqrt = inside;
    params.eps = 1e-6;
    const ds::cpu::LambArgs args = ds::optim::lamb_args(params);
    std::vector<float> by_order[2];
    for (auto order : {Order::forward, Order::reverse}) {
      LaunchOptions o;
      o.order = order;
      std::vector<float> cpu_p = p0, gpu_p = p0, gpu_m(n, 0.0f), gpu_v(n, 0.0f);
      auto lamb = ds::optim::make_lamb(params, n, nullptr, ds::amp::Storage::F32);
      std::vector<ds::cuda::LambSegment> segments;
      int64_t first_block = 0;
      for (const ds::TensorRange& t : tensors) {
        const auto size = static_cast<int64_t>(t.size);
        segments.push_back({&gpu_p[t.offset], nullptr, &gpu_m[t.offset], &gpu_v[t.offset], size, first_block});
        first_block += (size + ds::cuda::kSegmentBlockElements - 1) / ds::cuda::kSegmentBlockElements;
      }
      const auto blocks = ds::cuda::segment_blocks(segments.data(), segments.size());
      REQUIRE(blocks.size() == 5);
      const auto launches = static_cast<unsigned>(blocks.size());
      for (int64_t step = 1; step <= 3; ++step) {
        const std::vector<float> g = normal_values(static_cast<int64_t>(n), static_cast<unsigned>(10 + step));
        const double lr = 1e-2;
        ds::Segment segment{cpu_p.data(), g.data(), n};
        lamb->step(std::span<const ds::Segment>(&segment, 1), tensors, lr, step);
        for (size_t t = 0; t < tensors.size(); ++t) segments[t].g = &g[tensors[t].offset];
        std::vector<double> partial(2 * blocks.size(), NAN), sums(2 * tensors.size(), NAN);
        ds::simt::launch(launches, 64, o, [&] {
          ds::cuda::lamb_moments_kernel(segments.data(), blocks.data(), args, partial.data());
        });
        ds::simt::launch(static_cast<unsigned>(segments.size()), 64, o,
                         [&] { ds::cuda::lamb_sums_kernel(segments.data(), partial.data(), sums.data()); });
        std::vector<float> scales;
        for (size_t t = 0; t < tensors.size(); ++t) {
          double p_sq = 0.0, u_sq = 0.0;  // each tensor's sums, in double in element order
          for (size_t i = tensors[t].offset; i < tensors[t].offset + tensors[t].size; ++i) {
            const double u = ds::cpu::lamb_update(gpu_p[i], gpu_m[i], gpu_v[i], args);
            p_sq += static_cast<double>(gpu_p[i]) * gpu_p[i];
            u_sq += u * u;
          }
          CHECK(sums[2 * t] == doctest::Approx(p_sq).epsilon(1e-12));
          CHECK(sums[2 * t + 1] == doctest::Approx(u_sq).epsilon(1e-12));
          scales.push_back(ds::optim::lamb_step_size(params, lr, step) *
                           ds::optim::lamb_trust_ratio(params, sums[2 * t], sums[2 * t + 1]));
        }
        ds::simt::launch(launches, 64, o, [&] {
          ds::cuda::lamb_apply_kernel(segments.data(), blocks.data(), args, scales.data());
        });
      }
      const auto state = lamb->state();
      CHECK(std::equal(gpu_m.begin(), gpu_m.end(), static_cast<const float*>(state[0].data)));
      CHECK(std::equal(gpu_v.begin(), gpu_v.end(), static_cast<const float*>(state[1].data)));
      // The sums add in another order: a trust ratio may round to its neighbour, moving a parameter by at
      // most a unit in its last place.
      size_t last_bit = 0;
      for (size_t i = 0; i < n; ++i) {
        if (gpu_p[i] == cpu_p[i]) continue;
        ++last_bit;
        CHECK(std::nextafter(gpu_p[i], cpu_p[i]) == cpu_p[i]);
      }
      CHECK(gpu_p != p0);
      if (order == Order::forward) MESSAGE("lamb on the emulator: ", last_bit, " of ", n, " parameters differ in their last bit");
      by_order[order == Order::reverse] = gpu_p;
    }
    CHECK(by_order[0] == by_order[1]);
  }
}

TEST_CASE("cuda gelu on the emulator matches the CPU reference") {
  // x over [-12, 12) and the limits: where σ(2u) is tiny the relative error is a few roundings (rtol
  // 1e-5, as for the CPU fast path); atol covers values near 0.
  std::vector<float> x;
  for (int i = -1200; i < 1200; ++i) x.push_back(0.01f * static_cast<float>(i) + 0.003f);
  for (float v : {0.0f, -0.0f, 1e-30f, -50.0f, 50.0f, 1e20f, -1e20f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> dy(x.size()), y(x.size()), dx(x.size()), yr(x.size()), dxr(x.size());
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 1.0f - 0.0007f * static_cast<float>(i % 2000);
  ds::simt::launch(5, 96, {}, [&] { ds::cuda::gelu_forward_kernel(x.data(), y.data(), n); });
  ds::simt::launch(5, 96, {}, [&] { ds::cuda::gelu_backward_kernel(x.data(), dy.data(), dx.data(), n); });
  ds::cpu::gelu_forward_reference(x.data(), yr.data(), n);
  ds::cpu::gelu_backward_reference(x.data(), dy.data(), dxr.data(), n);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(x[i]);
    REQUIRE(std::fabs(y[i] - yr[i]) <= 1e-7 + 1e-5 * std::fabs(yr[i]));
    REQUIRE(std::fabs(dx[i] - dxr[i]) <= 1e-7 + 1e-5 * std::fabs(dxr[i]));
    worst = std::max<double>({worst, std::fabs(y[i] - yr[i]), std::fabs(dx[i] - dxr[i])});
  }
  std::printf("cuda gelu (emulated) vs reference: worst |error| %.3g\n", worst);
}

TEST_CASE("cuda cross-entropy on the emulator matches the CPU reference") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t classes : {1, 10, 33, 1000}) {
    for (unsigned threads : {32u, 128u}) {
      CAPTURE(classes);
      CAPTURE(threads);
      const int64_t rows = 4;
      std::vector<float> logits(rows * classes);
      for (auto& v : logits) v = normal(rng);
      logits[0] += 1000.0f;  // a large logit: the max is kept apart from the sum
      std::vector<int32_t> labels(rows);
      for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>((r * 7) % classes);
      std::vector<float> stats(2 * rows), row_loss(rows), ref_stats(2 * rows);
      ds::simt::launch(static_cast<unsigned>(rows), threads, {}, [&] {
        ds::cuda::cross_entropy_forward_kernel(logits.data(), labels.data(), classes, stats.data(), row_loss.data());
      });
      const float ref = ds::cpu::cross_entropy_forward_reference(logits.data(), labels.data(), rows, classes,
                                                                 ref_stats.data());
      double mean = 0;
      for (float l : row_loss) mean += l;
      mean /= static_cast<double>(rows);
      CHECK(std::fabs(mean - ref) <= 1e-5 + 1e-5 * std::fabs(ref));
      for (size_t i = 0; i < stats.size(); ++i) CHECK(std::fabs(stats[i] - ref_stats[i]) <= 1e-5 + 1e-6 * std::fabs(ref_stats[i]));
      std::vector<float> dlogits(logits.size()), ref_d(logits.size());
      ds::simt::launch(static_cast<unsigned>(rows), threads, {}, [&] {
        ds::cuda::cross_entropy_backward_kernel(logits.data(), labels.data(), stats.data(), 2.0f / rows, classes,
                                                dlogits.data());
      });
      ds::cpu::cross_entropy_backward_reference(logits.data(), labels.data(), ref_stats.data(), 2.0f, rows, classes,
                                                ref_d.data());
      for (size_t i = 0; i < ref_d.size(); ++i) REQUIRE(std::fabs(dlogits[i] - ref_d[i]) <= 1e-6 + 1e-5 * std::fabs(ref_d[i]));
    }
  }
  // A label outside the classes: NaN for that row (the device cannot throw).
  std::vector<float> logits(8, 0.5f), stats(4), row_loss(2);
  std::vector<int32_t> labels = {1, 4};
  ds::simt::launch(2, 32, {}, [&] {
    ds::cuda::cross_entropy_forward_kernel(logits.data(), labels.data(), 4, stats.data(), row_loss.data());
  });
  CHECK(std::fabs(row_loss[0] - std::log(4.0f)) < 1e-6);
  CHECK(std::isnan(row_loss[1]));
}

TEST_CASE("cuda layernorm backward on the emulator matches the CPU reference") {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t rows : {1, 5, 37}) {
    for (int64_t dim : {1, 33, 300}) {
      CAPTURE(rows);
      CAPTURE(dim);
      std::vector<float> x(rows * dim), gamma(dim), dy(rows * dim), stats(2 * rows), y(rows * dim);
      for (auto& v : x) v = 2.0f + normal(rng);
      for (auto& v : gamma) v = 1.0f + 0.2f * normal(rng);
      for (auto& v : dy) v = normal(rng);
      const std::vector<float> beta(dim, 0.0f);
      ds::cpu::layernorm_forward_reference(x.data(), gamma.data(), beta.data(), y.data(), stats.data(), rows, dim, 1e-5f);
      std::vector<float> dx(x.size()), dgamma(dim, 0.5f), dbeta(dim, -0.5f);  // accumulated onto
      std::vector<float> ref_dx(x.size()), ref_dgamma(dgamma), ref_dbeta(dbeta);
      ds::simt::launch(static_cast<unsigned>(rows), 64, {}, [&] {
        ds::cuda::layernorm_backward_dx_kernel(x.data(), gamma.data(), stats.data(), dy.data(), dx.data(), dim);
      });
      ds::cpu::layernorm_backward_reference(x.data(), gamma.data(), stats.data(), dy.data(), ref_dx.data(),
                                            ref_dgamma.data(), ref_dbeta.data(), rows, dim);
      for (size_t i = 0; i < dx.size(); ++i) REQUIRE(std::fabs(dx[i] - ref_dx[i]) <= 1e-5 + 1e-4 * std::fabs(ref_dx[i]));
      // dgamma/dbeta: tiles of 32 columns x 16 row lanes over 1 to 3 chunks of rows (grid y; at 1 row
      // some chunks are empty), then the chunks' sums; the same bits in both thread orders.
      const auto params = [&](unsigned chunks, ds::simt::Order order) {
        std::vector<float> g(dgamma), b(dbeta), partial(2 * chunks * dim, NAN);  // each partial written
        ds::simt::LaunchOptions o;
        o.order = order;
        ds::simt::launch(ds::simt::dim3(ds::cuda::ln_param_blocks(dim), chunks), ds::simt::dim3(32, 16), o, [&] {
          ds::cuda::layernorm_backward_partials_kernel(x.data(), stats.data(), dy.data(), partial.data(), rows, dim);
        });
        ds::simt::launch(static_cast<unsigned>((dim + 63) / 64), 64, o, [&] {
          ds::cuda::layernorm_backward_totals_kernel(partial.data(), g.data(), b.data(), chunks, dim);
        });
        return std::pair{g, b};
      };
      for (unsigned chunks : {1u, 2u, 3u}) {
        CAPTURE(chunks);
        const auto [g, b] = params(chunks, ds::simt::Order::forward);
        CHECK(params(chunks, ds::simt::Order::reverse) == std::pair{g, b});
        for (int64_t c = 0; c < dim; ++c) {
          REQUIRE(std::fabs(g[c] - ref_dgamma[c]) <= 1e-5 + 1e-5 * std::fabs(ref_dgamma[c]));
          REQUIRE(std::fabs(b[c] - ref_dbeta[c]) <= 1e-5 + 1e-5 * std::fabs(ref_dbeta[c]));
        }
      }
    }
  }
}

TEST_CASE("cuda attention's softmax rows on the emulator: causal, stats, recomputed P, dS; both thread orders alike") {
  // The products are GEMMs (attention.cpp; checked end to end against the CPU reference by the
  // self-test's unit test); here the row kernels against plain double loops.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int64_t T : {1, 5, 33, 70}) {
    for (unsigned threads : {32u, 96u}) {
      CAPTURE(T);
      CAPTURE(threads);
      const int64_t rows = 2 * T;  // two heads
      const ds::cuda::QueryChunk whole{T, 0, T};
      std::vector<float> scores(rows * T), dp(rows * T);
      for (auto& v : scores) v = normal(rng);
      for (auto& v : dp) v = normal(rng);
      std::vector<float> p[2], stats[2], recomputed, ds[2];
      for (Order order : {Order::forward, Order::reverse}) {
        const int i = order == Order::reverse;
        LaunchOptions o;
        o.order = order;
        p[i] = scores;
        stats[i].assign(2 * rows, NAN);
        ds[i] = dp;
        ds::simt::launch(static_cast<unsigned>(rows), threads, o,
                         [&] { ds::cuda::softmax_rows_kernel(p[i].data(), stats[i].data(), whole, nullptr, kBf16); });
        ds::simt::launch(static_cast<unsigned>(rows), threads, o,
                         [&] { ds::cuda::softmax_backward_kernel(p[i].data(), ds[i].data(), whole, nullptr, kBf16); });
      }
      CHECK(p[0] == p[1]);
      CHECK(stats[0] == stats[1]);
      CHECK(ds[0] == ds[1]);
      recomputed = scores;
      ds::simt::launch(static_cast<unsigned>(rows), 64, {},
                       [&] { ds::cuda::probs_from_stats_kernel(recomputed.data(), stats[0].data(), whole, nullptr, kBf16); });
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = r % T;
        const float* s = scores.data() + r * T;
        double m = -INFINITY, sum = 0, dot = 0;
        for (int64_t j = 0; j <= t; ++j) m = std::max<double>(m, s[j]);
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[j] - m);
        for (int64_t j = 0; j <= t; ++j) dot += std::exp(s[j] - m) / sum * dp[r * T + j];
        REQUIRE(std::fabs(stats[0][2 * r] - m) <= 1e-6 * (1 + std::fabs(m)));
        REQUIRE(std::fabs(stats[0][2 * r + 1] - std::log(sum)) <= 1e-5);
        for (int64_t j = 0; j < T; ++j) {
          const double want_p = j <= t ? std::exp(s[j] - m) / sum : 0.0;
          const double want_ds = j <= t ? want_p * (dp[r * T + j] - dot) : 0.0;
          REQUIRE(std::fabs(p[0][r * T + j] - want_p) <= 1e-6);
          REQUIRE(std::fabs(recomputed[r * T + j] - want_p) <= 1e-6);
          REQUIRE(std::fabs(ds[0][r * T + j] - want_ds) <= 1e-5);
        }
      }
    }
  }
}

TEST_CASE("cuda attention's row kernels in 16 bits: the conversion's bits of their fp32 values, fp32 ones as they were") {
  // With 16-bit products the row kernels write P and dS for the next product themselves; those must be
  // the bits that converting their fp32 values gives (the products then see what a separate conversion
  // pass gave them), and the fp32 values they still write (probs_from_stats' P) unchanged.
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (ds::amp::Half type : {ds::amp::Half::BF16, ds::amp::Half::F16}) {
    for (int64_t T : {1, 33, 70}) {
      CAPTURE(T);
      const int64_t rows = 2 * T, n = rows * T;  // two heads
      const ds::cuda::QueryChunk whole{T, 0, T};
      std::vector<float> scores(n), dp(n);
      for (auto& v : scores) v = normal(rng);
      for (auto& v : dp) v = normal(rng);
      const auto convert = [&](const std::vector<float>& x) {
        std::vector<uint16_t> out(x.size());
        for (size_t i = 0; i < x.size(); ++i) out[i] = ds::cuda::to_half_bits(type, x[i]);
        return out;
      };
      std::vector<float> p32 = scores, stats(2 * rows), ds32 = dp;  // the fp32 forms
      const auto per_row = [&](const std::function<void()>& kernel) {
        ds::simt::launch(static_cast<unsigned>(rows), 64, {}, kernel);
      };
      per_row([&] { ds::cuda::softmax_rows_kernel(p32.data(), stats.data(), whole, nullptr, type); });
      per_row([&] { ds::cuda::softmax_backward_kernel(p32.data(), ds32.data(), whole, nullptr, type); });
      std::vector<float> s16_scores = scores, stats16(2 * rows), dp16 = dp;
      std::vector<uint16_t> p16(n, 0xFFFF), ds16(n, 0xFFFF);
      per_row([&] { ds::cuda::softmax_rows_kernel(s16_scores.data(), stats16.data(), whole, p16.data(), type); });
      CHECK(p16 == convert(p32));
      CHECK(stats16 == stats);
      CHECK(s16_scores == scores);  // the scores stay
      per_row([&] { ds::cuda::softmax_backward_kernel(p32.data(), dp16.data(), whole, ds16.data(), type); });
      CHECK(ds16 == convert(ds32));
      CHECK(dp16 == dp);  // dP stays
      std::vector<float> recomputed = scores, recomputed16 = scores;
      std::vector<uint16_t> r16(n, 0xFFFF);
      per_row([&] { ds::cuda::probs_from_stats_kernel(recomputed.data(), stats.data(), whole, nullptr, type); });
      per_row([&] { ds::cuda::probs_from_stats_kernel(recomputed16.data(), stats.data(), whole, r16.data(), type); });
      CHECK(recomputed16 == recomputed);
      CHECK(r16 == convert(recomputed));
    }
  }
}

TEST_CASE("cuda attention's row kernels on a query chunk: the whole rows' values on the chunk's rows and prefix") {
  // The GEMM form forms each query chunk's scores against its causal prefix only (query_chunk.h): over
  // such a block [heads, rows, width] the row kernels must give the values they give on those rows of
  // the whole [heads·T, T] (the columns past the chunk are 0 there), the stats at the chunk's rows
  // and no others.
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t T = 45, heads = 3;
  const ds::cuda::QueryChunk whole{T, 0, T};
  std::vector<float> scores(heads * T * T), dp(heads * T * T);
  for (auto& v : scores) v = normal(rng);
  for (auto& v : dp) v = normal(rng);
  std::vector<float> p_all = scores, stats_all(2 * heads * T), ds_all = dp, r_all = scores;
  ds::simt::launch(static_cast<unsigned>(heads * T), 64, {},
                   [&] { ds::cuda::softmax_rows_kernel(p_all.data(), stats_all.data(), whole, nullptr, kBf16); });
  ds::simt::launch(static_cast<unsigned>(heads * T), 64, {},
                   [&] { ds::cuda::softmax_backward_kernel(p_all.data(), ds_all.data(), whole, nullptr, kBf16); });
  ds::simt::launch(static_cast<unsigned>(heads * T), 64, {},
                   [&] { ds::cuda::probs_from_stats_kernel(r_all.data(), stats_all.data(), whole, nullptr, kBf16); });
  for (const ds::cuda::QueryChunk chunk : {ds::cuda::QueryChunk{T, 0, 16}, ds::cuda::QueryChunk{T, 16, 16},
                                           ds::cuda::QueryChunk{T, 32, 13}, ds::cuda::QueryChunk{T, 44, 1}}) {
    for (Order order : {Order::forward, Order::reverse}) {
      CAPTURE(chunk.first);
      CAPTURE(chunk.rows);
      const int64_t R = chunk.rows, W = chunk.width();
      const auto block = [&](const std::vector<float>& x) {  // the chunk's block of a whole [heads·T, T]
        std::vector<float> out(heads * R * W);
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t r = 0; r < R; ++r)
            for (int64_t j = 0; j < W; ++j) out[(h * R + r) * W + j] = x[(h * T + chunk.first + r) * T + j];
        return out;
      };
      LaunchOptions o;
      o.order = order;
      std::vector<float> p = block(scores), stats(2 * heads * T, NAN), ds = block(dp), r = block(scores);
      // (the rows' sums with the whole rows' block size: the same sums in the same order)
      ds::simt::launch(static_cast<unsigned>(heads * R), 64, o,
                       [&] { ds::cuda::softmax_rows_kernel(p.data(), stats.data(), chunk, nullptr, kBf16); });
      ds::simt::launch(static_cast<unsigned>(heads * R), 64, o,
                       [&] { ds::cuda::softmax_backward_kernel(p.data(), ds.data(), chunk, nullptr, kBf16); });
      ds::simt::launch(static_cast<unsigned>(heads * R), 32, o,
                       [&] { ds::cuda::probs_from_stats_kernel(r.data(), stats_all.data(), chunk, nullptr, kBf16); });
      CHECK(p == block(p_all));
      CHECK(ds == block(ds_all));
      CHECK(r == block(r_all));
      for (int64_t row = 0; row < heads * T; ++row) {
        const bool in_chunk = row % T >= chunk.first && row % T < W;
        for (int i : {0, 1}) {
          if (in_chunk) CHECK(stats[2 * row + i] == stats_all[2 * row + i]);
          else CHECK(std::isnan(stats[2 * row + i]));
        }
      }
    }
  }
}

TEST_CASE("attention_query_rows: whole 16-row tiles, 4 to 16 chunks, every query in one") {
  CHECK(ds::cuda::attention_query_rows(1) == 16);
  CHECK(ds::cuda::attention_query_rows(37) == 16);  // 16, 16, 5
  CHECK(ds::cuda::attention_query_rows(70) == 32);  // 32, 32, 6
  CHECK(ds::cuda::attention_query_rows(1024) == 256);  // GPT-2: 4 chunks, 62.5% of the T×T products
  CHECK(ds::cuda::attention_query_rows(2048) == 256);
  CHECK(ds::cuda::attention_query_rows(8192) == 512);  // 16 chunks
  for (int64_t T = 1; T <= 9000; T += 37) {
    const int64_t rows = ds::cuda::attention_query_rows(T), chunks = (T + rows - 1) / rows;
    REQUIRE(rows % 16 == 0);
    REQUIRE(chunks <= 16);
    REQUIRE(chunks * rows >= T);
  }
}

TEST_CASE("cuda attention's head layout kernels move every element and nothing else") {
  const int64_t B = 2, T = 3, H = 4, D = 5, C = H * D;
  std::vector<float> qkv(static_cast<size_t>(B * T * 3 * C));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i);
  std::vector<float> heads(static_cast<size_t>(B * H * T * D), NAN), back(qkv.size(), -1.0f);
  ds::simt::launch(2, 32, {}, [&] { ds::cuda::rows_to_heads_kernel(qkv.data() + C, 3 * C, heads.data(), B, T, H, D); });
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          REQUIRE(heads[((b * H + h) * T + t) * D + d] == qkv[(b * T + t) * 3 * C + C + h * D + d]);  // k's part
  ds::simt::launch(2, 32, {}, [&] { ds::cuda::heads_to_rows_kernel(heads.data(), back.data() + C, 3 * C, B, T, H, D); });
  for (size_t i = 0; i < qkv.size(); ++i) {
    const bool k_part = (i % (3 * C)) / C == 1;
    REQUIRE(back[i] == (k_part ? qkv[i] : -1.0f));
  }
}
