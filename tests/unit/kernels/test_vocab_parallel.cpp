// The vocabulary-parallel embedding and cross-entropy: the shards of a vocabulary split over P ranks,
// combined as the tensor-parallel group combines them (sum, max), give the whole vocabulary's
// reference kernels' results: the lookup and its gradient exactly, the loss and the logits' gradient
// within fp32 rounding; bad ids are refused before anything is written; a NaN logit makes a NaN loss.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "cpu/cross_entropy.h"
#include "cpu/embedding.h"
#include "cpu/vocab_parallel.h"
#include "kernel_test_util.h"

using ds::test::Rng;

TEST_CASE("vocabulary-parallel embedding: the shards' lookups sum to the whole lookup, their gradients are its rows") {
  Rng rng(7);
  for (auto [n, C, vocab, ranks] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{5, 3, 6, 2}, {33, 16, 64, 4},
                                    {64, 24, 36, 3}}) {
    CAPTURE(vocab);
    CAPTURE(ranks);
    std::vector<float> wte(static_cast<size_t>(vocab * C)), zeros(static_cast<size_t>(n * C), 0.0f);
    for (float& w : wte) w = rng.uniform(-1.0f, 1.0f);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = static_cast<int32_t>(rng.below(vocab));
    std::vector<float> dout(static_cast<size_t>(n * C));
    for (float& g : dout) g = rng.uniform(-1.0f, 1.0f);
    std::vector<float> whole(static_cast<size_t>(n * C)), dwte(wte.size(), 0.0f), dwpe(static_cast<size_t>(n * C), 0.0f);
    ds::cpu::embedding_forward_reference(tokens.data(), wte.data(), zeros.data(), whole.data(), 1, n, C, vocab);
    ds::cpu::embedding_backward(tokens.data(), dout.data(), dwte.data(), dwpe.data(), 1, n, C, vocab);

    const int64_t rows = vocab / ranks;
    std::vector<float> summed(whole.size(), 0.0f), shard_out(whole.size()), shard_grads;
    for (int64_t r = 0; r < ranks; ++r) {
      ds::cpu::embedding_rows_forward(tokens.data(), wte.data() + r * rows * C, shard_out.data(), n, C, r * rows, rows,
                                      vocab);
      for (size_t i = 0; i < summed.size(); ++i) summed[i] += shard_out[i];
      std::vector<float> grad(static_cast<size_t>(rows * C), 0.0f);
      ds::cpu::embedding_rows_backward(tokens.data(), dout.data(), grad.data(), n, C, r * rows, rows, vocab);
      shard_grads.insert(shard_grads.end(), grad.begin(), grad.end());
    }
    CHECK(summed == whole);
    CHECK(shard_grads == dwte);  // each token's rows added in position order, as the whole kernel adds them
  }
  std::vector<int32_t> bad{1, 9};
  std::vector<float> wte(8, 1.0f), out(4, -1.0f);
  CHECK_THROWS_WITH_AS(ds::cpu::embedding_rows_forward(bad.data(), wte.data(), out.data(), 2, 2, 0, 4, 8),
                       "embedding: token 9 at position 1 is not in [0, 8)", std::out_of_range);
  CHECK(out[0] == -1.0f);  // nothing written
}

namespace {

// The cross-entropy of logits [n, vocab] computed as `ranks` ranks holding column shards would.
float sharded_loss(const std::vector<float>& logits, const std::vector<int32_t>& labels, int64_t n, int64_t vocab,
                   int64_t ranks, std::vector<float>* dlogits, float g) {
  const int64_t classes = vocab / ranks;
  std::vector<std::vector<float>> shards(static_cast<size_t>(ranks)), stats(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) {
    auto& shard = shards[static_cast<size_t>(r)];
    for (int64_t i = 0; i < n; ++i)
      shard.insert(shard.end(), logits.begin() + i * vocab + r * classes, logits.begin() + i * vocab + (r + 1) * classes);
    stats[static_cast<size_t>(r)].assign(static_cast<size_t>(3 * n), 0.0f);
    ds::cpu::cross_entropy_shard_max(shard.data(), labels.data(), n, classes, r * classes, vocab,
                                     stats[static_cast<size_t>(r)].data());
  }
  auto all_reduce = [&](int64_t from, int64_t count, bool max) {  // what the group's all-reduce does
    for (int64_t i = from; i < from + count; ++i) {
      float v = max ? -std::numeric_limits<float>::infinity() : 0.0f;
      for (auto& s : stats) v = max ? std::max(v, s[static_cast<size_t>(i)]) : v + s[static_cast<size_t>(i)];
      for (auto& s : stats) s[static_cast<size_t>(i)] = v;
    }
  };
  all_reduce(0, n, true);
  for (int64_t r = 0; r < ranks; ++r)
    ds::cpu::cross_entropy_shard_sumexp(shards[static_cast<size_t>(r)].data(), n, classes, stats[static_cast<size_t>(r)].data());
  all_reduce(n, 2 * n, false);
  if (dlogits) {
    dlogits->assign(logits.size(), 0.0f);
    for (int64_t r = 0; r < ranks; ++r) {
      std::vector<float> d(static_cast<size_t>(n * classes));
      ds::cpu::cross_entropy_shard_backward(shards[static_cast<size_t>(r)].data(), labels.data(),
                                            stats[static_cast<size_t>(r)].data(), g, n, classes, r * classes, d.data());
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(d.begin() + i * classes, classes, dlogits->begin() + i * vocab + r * classes);
    }
  }
  return ds::cpu::cross_entropy_shard_loss(stats[0].data(), n);
}

}  // namespace

TEST_CASE("vocabulary-parallel cross-entropy: shards combined by max and sum give the whole loss and gradient") {
  Rng rng(11);
  for (auto [n, vocab, ranks, spread] : {std::tuple<int64_t, int64_t, int64_t, float>{1, 4, 2, 1.0f}, {7, 12, 3, 3.0f},
                                         {64, 256, 4, 30.0f}, {5, 50, 2, 1000.0f}}) {
    CAPTURE(vocab);
    CAPTURE(ranks);
    std::vector<float> logits(static_cast<size_t>(n * vocab));
    for (float& x : logits) x = spread * rng.uniform(-1.0f, 1.0f);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (auto& y : labels) y = static_cast<int32_t>(rng.below(vocab));
    std::vector<float> stats(static_cast<size_t>(2 * n)), want(logits.size()), got;
    const float loss = ds::cpu::cross_entropy_forward_reference(logits.data(), labels.data(), n, vocab, stats.data());
    ds::cpu::cross_entropy_backward_reference(logits.data(), labels.data(), stats.data(), 0.5f, n, vocab, want.data());
    const float sharded = sharded_loss(logits, labels, n, vocab, ranks, &got, 0.5f);
    CHECK(sharded == doctest::Approx(loss).epsilon(1e-6));
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
    CHECK(worst < 1e-7);
  }
  std::vector<float> logits{0.0f, 1.0f, std::nanf(""), 2.0f};
  CHECK(std::isnan(sharded_loss(logits, {1, 0}, 2, 2, 2, nullptr, 1.0f)));  // rank 0 holds the NaN, of row 1
  std::vector<float> stats(6);
  std::vector<int32_t> bad{0, 4};
  CHECK_THROWS_WITH_AS(ds::cpu::cross_entropy_shard_max(logits.data(), bad.data(), 2, 2, 0, 4, stats.data()),
                       "cross_entropy: label 4 at position 1 is not in [0, 4)", std::out_of_range);
}
