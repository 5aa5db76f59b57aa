// kernels/cuda's vocabulary-parallel embedding and cross-entropy (vocab_parallel.cuh) on the SIMT
// emulator against kernels/cpu's: the same row bodies, so the CPU's bits (exps in double on both sides),
// with small grids so every grid-stride loop wraps; a token or label outside the vocabulary gives NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "cpu/vocab_parallel.h"
#include "cuda/vocab_parallel.cuh"

namespace {

std::vector<float> random_floats(std::mt19937& rng, size_t n, float spread) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

void launch(unsigned grid, unsigned block, const std::function<void()>& kernel) { ds::simt::launch(grid, block, {}, kernel); }

}  // namespace

TEST_CASE("cuda vocabulary-parallel embedding: the CPU's bits, tokens off the shard zero, repeated tokens in order") {
  std::mt19937 rng(8);
  const int64_t n = 13, C = 37, vocab = 12, first = 4, rows = 4;
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 5 % vocab);
  const auto wte = random_floats(rng, rows * C, 1.0f), dout = random_floats(rng, n * C, 1.0f);
  std::vector<float> cpu_out(n * C), gpu_out(n * C, NAN);
  ds::cpu::embedding_rows_forward(tokens.data(), wte.data(), cpu_out.data(), n, C, first, rows, vocab);
  launch(3, 64, [&] { ds::cuda::embedding_rows_forward_kernel(tokens.data(), wte.data(), gpu_out.data(), n, C, first, rows, vocab); });
  CHECK(gpu_out == cpu_out);
  auto cpu_grad = random_floats(rng, rows * C, 1.0f), gpu_grad = cpu_grad;
  ds::cpu::embedding_rows_backward(tokens.data(), dout.data(), cpu_grad.data(), n, C, first, rows, vocab);
  for (unsigned groups : {1u, 2u, 5u}) {  // token groups (grid y): every split the CPU's bits
    CAPTURE(groups);
    auto grad = gpu_grad;
    ds::simt::launch(ds::simt::dim3(2, groups), 32, {}, [&] {
      ds::cuda::embedding_rows_backward_kernel(tokens.data(), dout.data(), grad.data(), n, C, first, rows);
    });
    CHECK(grad == cpu_grad);
  }
  tokens[2] = static_cast<int32_t>(vocab);
  launch(3, 64, [&] { ds::cuda::embedding_rows_forward_kernel(tokens.data(), wte.data(), gpu_out.data(), n, C, first, rows, vocab); });
  for (int64_t i = 0; i < n * C; ++i) {
    if (i / C == 2) CHECK(std::isnan(gpu_out[i]));
    else CHECK(gpu_out[i] == cpu_out[i]);
  }
}

TEST_CASE("cuda vocabulary-parallel cross-entropy: stats, loss and gradient are the CPU's bits") {
  std::mt19937 rng(9);
  for (auto [n, classes, first, spread] : {std::tuple<int64_t, int64_t, int64_t, float>{1, 3, 0, 1.0f}, {37, 20, 20, 5.0f},
                                           {300, 7, 14, 100.0f}}) {
    CAPTURE(n);
    CAPTURE(classes);
    const int64_t vocab = 3 * classes;
    const auto logits = random_floats(rng, n * classes, spread);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(rng() % vocab);
    std::vector<float> cpu_stats(3 * n, 0.0f), gpu_stats(3 * n, 0.0f);
    ds::cpu::cross_entropy_shard_max(logits.data(), labels.data(), n, classes, first, vocab, cpu_stats.data());
    const auto row_blocks = static_cast<unsigned>((n + 31) / 32);  // one thread per row
    launch(row_blocks, 32, [&] {
      ds::cuda::cross_entropy_shard_max_kernel(logits.data(), labels.data(), n, classes, first, vocab, gpu_stats.data());
    });
    for (int64_t r = 0; r < n; ++r) cpu_stats[r] = gpu_stats[r] += 0.5f;  // as if another rank's max were higher
    ds::cpu::cross_entropy_shard_sumexp(logits.data(), n, classes, cpu_stats.data());
    launch(row_blocks, 32, [&] { ds::cuda::cross_entropy_shard_sumexp_kernel(logits.data(), n, classes, gpu_stats.data()); });
    CHECK(gpu_stats == cpu_stats);
    float gpu_loss = NAN;
    launch(1, 1, [&] { ds::cuda::cross_entropy_shard_loss_kernel(gpu_stats.data(), n, &gpu_loss); });
    CHECK(gpu_loss == ds::cpu::cross_entropy_shard_loss(cpu_stats.data(), n));
    const float dloss = 0.75f;
    std::vector<float> cpu_d(n * classes), gpu_d(n * classes, NAN);
    ds::cpu::cross_entropy_shard_backward(logits.data(), labels.data(), cpu_stats.data(), dloss, n, classes, first, cpu_d.data());
    launch(3, 64, [&] {
      ds::cuda::cross_entropy_shard_backward_kernel(logits.data(), labels.data(), gpu_stats.data(), &dloss, n, classes,
                                                    first, gpu_d.data());
    });
    CHECK(gpu_d == cpu_d);
  }
  std::vector<float> logits{1.0f, 2.0f}, stats(3, 0.0f);
  std::vector<int32_t> bad{7};
  launch(1, 32, [&] { ds::cuda::cross_entropy_shard_max_kernel(logits.data(), bad.data(), 1, 2, 0, 4, stats.data()); });
  CHECK(std::isnan(stats[0]));  // a label outside the vocabulary cannot throw on the device: its row is NaN
}
